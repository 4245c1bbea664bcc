"""The OpenAI Agents SDK completes a tool round trip through toolwire in front of a scripted backend:
the model calls the tool, the SDK runs it and sends the result back, the model answers —
``Runner.run`` and ``Runner.run_streamed``, with the SDK's default model (``OpenAIResponsesModel``:
the Responses API) and with ``OpenAIChatCompletionsModel`` (Chat Completions, where the SDK hands the
call-only assistant turn back with ``"content": null``)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from agents import Agent, OpenAIChatCompletionsModel, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled
from openai import AsyncOpenAI

from tests.agent_round_trip import CITY, INSTRUCTIONS, check_call_only_round_trip
from tests.agent_round_trip import scripted_model as agent_scripted_model
from tests.conftest import QWEN3_TEMPLATE

RESULT = "RESULT-overcast-4411"
ANSWER = f"It is overcast in {CITY}."
scripted_model = agent_scripted_model(RESULT, ANSWER)


@pytest.mark.parametrize("streamed", [False, True])
def test_agents_sdk_default_model_round_trip(streamed: bool, backend_factory, proxy_factory) -> None:
    backend = backend_factory("vllm", model="Qwen/Qwen3-8B")
    backend.responder = scripted_model
    proxy = proxy_factory(backend=backend.url, chat_template=str(QWEN3_TEMPLATE), reasoning_parser="qwen3",
                          tool_call_parser="qwen25")
    seen: list[str] = []

    @function_tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        seen.append(city)
        return RESULT

    set_tracing_disabled(True)

    async def scenario() -> str:
        client = AsyncOpenAI(base_url=proxy.url + "/v1", api_key="unused", max_retries=0)
        model = OpenAIResponsesModel(model="qwen3", openai_client=client)
        agent = Agent(name="weather", instructions=INSTRUCTIONS, tools=[get_weather], model=model)
        if not streamed:
            return str((await Runner.run(agent, "Weather in Reykjavik?")).final_output)
        run = Runner.run_streamed(agent, "Weather in Reykjavik?")
        async for _ in run.stream_events():
            pass
        return str(run.final_output)

    answer = asyncio.run(scenario())
    assert answer == ANSWER
    assert seen == [CITY]  # the SDK ran the tool the model called
    prompts = [b["prompt"] for b in backend.bodies()]
    assert len(prompts) == 2 and RESULT in prompts[1] and '"city": "Reykjavik"' in prompts[1]


@pytest.mark.parametrize("streamed", [False, True])
def test_agents_sdk_chat_completions_model_round_trip(streamed: bool, backend_factory, proxy_factory) -> None:
    backend = backend_factory("vllm", model="Qwen/Qwen3-8B")
    backend.responder = scripted_model
    proxy = proxy_factory(backend=backend.url, chat_template=str(QWEN3_TEMPLATE), reasoning_parser="qwen3",
                          tool_call_parser="qwen25")
    seen: list[str] = []
    sent: list[dict[str, Any]] = []  # the request bodies the SDK sent to toolwire

    async def record(request: httpx.Request) -> None:
        if request.url.path.endswith("/chat/completions"):
            sent.append(json.loads(request.content))

    @function_tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        seen.append(city)
        return RESULT

    set_tracing_disabled(True)

    async def scenario() -> str:
        async with httpx.AsyncClient(event_hooks={"request": [record]}) as http:
            client = AsyncOpenAI(base_url=proxy.url + "/v1", api_key="unused", max_retries=0, http_client=http)
            model = OpenAIChatCompletionsModel(model="qwen3", openai_client=client)
            agent = Agent(name="weather", instructions=INSTRUCTIONS, tools=[get_weather], model=model)
            # two turns: the call, then the answer (a model that keeps calling fails at once)
            if not streamed:
                return str((await Runner.run(agent, "Weather in Reykjavik?", max_turns=2)).final_output)
            run = Runner.run_streamed(agent, "Weather in Reykjavik?", max_turns=2)
            async for _ in run.stream_events():
                pass
            return str(run.final_output)

    answer = asyncio.run(scenario())
    assert answer == ANSWER
    assert seen == [CITY]  # the SDK ran the tool the model called

    # what the SDK sent (the call-only turn as content null) and what reached the backend
    check_call_only_round_trip(sent, backend, RESULT, streamed)
