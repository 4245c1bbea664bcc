"""The OpenAI Agents SDK's default model (``OpenAIResponsesModel``: the Responses API) completes a tool
round trip through toolwire in front of a scripted backend: the model calls the tool, the SDK runs
it and sends the result back, the model answers — ``Runner.run`` and ``Runner.run_streamed``."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from agents import Agent, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled
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
