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

from tests.conftest import QWEN3_TEMPLATE
from tests.scripted_backend import Script

CITY = "Reykjavik"
RESULT = "RESULT-overcast-4411"


def scripted_model(body: dict[str, Any]) -> Script:
    prompt: str = body["prompt"]
    if RESULT in prompt[prompt.rfind("<|im_start|>user"):]:
        return Script(pieces=["<think>\nGot it.\n</think>\n\n", f"It is overcast in {CITY}."])
    call = json.dumps({"name": "get_weather", "arguments": {"city": CITY}})
    return Script(pieces=["<think>\nAsk the tool.\n</think>\n\n", "<tool_call>\n", call[:20], call[20:],
                          "\n</tool_call>"], delay=0.005)


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
        agent = Agent(name="weather", instructions="Answer with the tool.", tools=[get_weather], model=model)
        if not streamed:
            return str((await Runner.run(agent, "Weather in Reykjavik?")).final_output)
        run = Runner.run_streamed(agent, "Weather in Reykjavik?")
        async for _ in run.stream_events():
            pass
        return str(run.final_output)

    answer = asyncio.run(scenario())
    assert answer == f"It is overcast in {CITY}."
    assert seen == [CITY]  # the SDK ran the tool the model called
    prompts = [b["prompt"] for b in backend.bodies()]
    assert len(prompts) == 2 and RESULT in prompts[1] and '"city": "Reykjavik"' in prompts[1]


# the second prompt holds the call as the Qwen3 template renders an assistant's tool call, then the
# tool result in its own block, in that order
RENDERED_CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Reykjavik"}}\n</tool_call><|im_end|>'
RENDERED_RESULT = f"<|im_start|>user\n<tool_response>\n{RESULT}\n</tool_response><|im_end|>"


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
            agent = Agent(name="weather", instructions="Answer with the tool.", tools=[get_weather], model=model)
            # two turns: the call, then the answer (a model that keeps calling fails at once)
            if not streamed:
                return str((await Runner.run(agent, "Weather in Reykjavik?", max_turns=2)).final_output)
            run = Runner.run_streamed(agent, "Weather in Reykjavik?", max_turns=2)
            async for _ in run.stream_events():
                pass
            return str(run.final_output)

    answer = asyncio.run(scenario())
    assert answer == f"It is overcast in {CITY}."
    assert seen == [CITY]  # the SDK ran the tool the model called

    # what the SDK sent: two chat requests (streamed or not, as asked), the second with the call-only
    # assistant turn as the SDK serialises it — content null — and the tool result pointing at its call
    assert len(sent) == 2 and all(bool(body.get("stream")) == streamed for body in sent)
    history = sent[1]["messages"]
    assistant = next(m for m in history if m["role"] == "assistant")
    tool = next(m for m in history if m["role"] == "tool")
    assert "content" in assistant and assistant["content"] is None, assistant
    assert [c["function"]["name"] for c in assistant["tool_calls"]] == ["get_weather"]
    assert json.loads(assistant["tool_calls"][0]["function"]["arguments"]) == {"city": CITY}
    assert tool["tool_call_id"] == assistant["tool_calls"][0]["id"] and tool["content"] == RESULT

    # what reached the backend: the first prompt has neither; the second renders the call, then the result
    prompts = [b["prompt"] for b in backend.bodies()]
    assert len(prompts) == 2 and prompts[1].startswith("<|im_start|>system\nAnswer with the tool.")
    assert RENDERED_CALL not in prompts[0] and RESULT not in prompts[0]
    assert RENDERED_CALL in prompts[1] and RENDERED_RESULT in prompts[1], prompts[1]
    assert prompts[1].index(RENDERED_CALL) < prompts[1].index(RENDERED_RESULT)
    assert prompts[1].endswith("<|im_start|>assistant\n")
