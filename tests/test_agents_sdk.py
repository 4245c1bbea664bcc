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
from tests.scripted_backend import Script

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


def _history_checks(backend, first_question: str, second_question: str) -> None:
    """Two runs of the weather loop sharing one conversation: four model calls, and the second run's
    first prompt holds the whole first run (question, call, result, answer) before its question."""
    prompts = [b["prompt"] for b in backend.bodies()]
    assert len(prompts) == 4
    later = prompts[2]
    assert first_question in later and RESULT in later and ANSWER in later
    assert later.index(first_question) < later.index(ANSWER) < later.index(second_question)
    assert RESULT in prompts[3] and later.count(RESULT) == 1


@pytest.mark.parametrize("streamed", [False, True])
def test_agents_sdk_conversations_session_shares_a_conversation(streamed: bool, backend_factory,
                                                                 proxy_factory) -> None:
    """``OpenAIConversationsSession``: the SDK keeps the history in a toolwire conversation (items
    added and listed through /v1/conversations) and sends it back as input on every turn."""
    from agents.memory import OpenAIConversationsSession

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

    async def scenario() -> tuple[list[str], list[Any], list[Any]]:
        client = AsyncOpenAI(base_url=proxy.url + "/v1", api_key="unused", max_retries=0)
        model = OpenAIResponsesModel(model="qwen3", openai_client=client)
        agent = Agent(name="weather", instructions=INSTRUCTIONS, tools=[get_weather], model=model)
        session = OpenAIConversationsSession(openai_client=client)
        answers = []
        for question in ("Weather in Reykjavik?", "And tomorrow?"):
            if streamed:
                run = Runner.run_streamed(agent, question, session=session)
                async for _ in run.stream_events():
                    pass
                answers.append(str(run.final_output))
            else:
                answers.append(str((await Runner.run(agent, question, session=session)).final_output))
        stored = [item async for item in client.conversations.items.list(session.session_id, order="asc")]
        return answers, await session.get_items(), stored

    answers, items, stored = asyncio.run(scenario())
    assert answers == [ANSWER, ANSWER] and seen == [CITY, CITY]
    kinds = [item.type for item in stored]
    assert kinds == ["message", "reasoning", "function_call", "function_call_output", "reasoning", "message"] * 2
    assert [item["id"] for item in items] == [item.id for item in stored]
    _history_checks(backend, "Weather in Reykjavik?", "And tomorrow?")


@pytest.mark.parametrize("streamed", [False, True])
def test_agents_sdk_server_managed_conversation(streamed: bool, backend_factory, proxy_factory) -> None:
    """``Runner.run(conversation_id=…)``: the SDK sends only each turn's new items with
    ``conversation``; toolwire puts the conversation's items first and adds the turn's items to it."""
    backend = backend_factory("vllm", model="Qwen/Qwen3-8B")
    backend.responder = scripted_model
    proxy = proxy_factory(backend=backend.url, chat_template=str(QWEN3_TEMPLATE), reasoning_parser="qwen3",
                          tool_call_parser="qwen25")
    sent: list[dict[str, Any]] = []

    async def record(request: httpx.Request) -> None:
        if request.url.path.endswith("/responses"):
            sent.append(json.loads(request.content))

    @function_tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        return RESULT

    set_tracing_disabled(True)

    async def scenario() -> tuple[list[str], list[Any]]:
        async with httpx.AsyncClient(event_hooks={"request": [record]}) as http:
            client = AsyncOpenAI(base_url=proxy.url + "/v1", api_key="unused", max_retries=0, http_client=http)
            model = OpenAIResponsesModel(model="qwen3", openai_client=client)
            agent = Agent(name="weather", instructions=INSTRUCTIONS, tools=[get_weather], model=model)
            conversation = await client.conversations.create()
            answers = []
            for question in ("Weather in Reykjavik?", "And tomorrow?"):
                if streamed:
                    run = Runner.run_streamed(agent, question, conversation_id=conversation.id)
                    async for _ in run.stream_events():
                        pass
                    answers.append(str(run.final_output))
                else:
                    result = await Runner.run(agent, question, conversation_id=conversation.id)
                    answers.append(str(result.final_output))
            stored = [item async for item in client.conversations.items.list(conversation.id, order="asc")]
            return answers, stored

    answers, stored = asyncio.run(scenario())
    assert answers == [ANSWER, ANSWER]
    assert all(body.get("conversation") for body in sent) and len(sent) == 4
    assert [len(body["input"]) for body in sent] == [1, 1, 1, 1]  # only the new item each time
    kinds = [item.type for item in stored]
    assert kinds == ["message", "reasoning", "function_call", "function_call_output", "reasoning", "message"] * 2
    _history_checks(backend, "Weather in Reykjavik?", "And tomorrow?")


def test_a_long_tool_loop_is_prompted_as_without_caches(backend_factory, proxy_factory,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Five model calls in one Agents SDK run on Chat Completions (four call-only turns handed back
    with ``content: null``, their results, the answer): from the third request on, toolwire takes the
    messages it decoded for the request before and resumes the template's render (the first sights
    the conversation, the second is kept) — and every prompt that reaches the backend is byte for
    byte the one a server without those caches sends."""
    from app.prefix import PrefixService

    counts: list[int] = []
    recall = PrefixService.recall

    def spy(self: PrefixService, *args: Any, **kwargs: Any) -> Any:
        found = recall(self, *args, **kwargs)
        counts.append(0 if found is None else sum(1 for i in range(len(found.units)) if found.segment(i) is not None))
        return found

    monkeypatch.setattr(PrefixService, "recall", spy)

    def respond(body: dict[str, Any]) -> Script:
        prompt: str = body["prompt"]
        done = prompt.count("<tool_response>")
        if done >= 4:
            return Script(pieces=["<think>\nEnough.\n</think>\n\n", ANSWER], delay=0.002)
        call = json.dumps({"name": "get_weather", "arguments": {"city": f"{CITY} {done}"}})
        return Script(pieces=["<think>\nOne more.\n</think>\n\n", "<tool_call>\n", call, "\n</tool_call>"], delay=0.002)

    def run(prefix_cache_bytes: int) -> tuple[str, list[str], list[str]]:
        backend = backend_factory("vllm", model="Qwen/Qwen3-8B")
        backend.responder = respond
        proxy = proxy_factory(backend=backend.url, chat_template=str(QWEN3_TEMPLATE), reasoning_parser="qwen3",
                              tool_call_parser="qwen25", prefix_cache_bytes=prefix_cache_bytes)
        seen: list[str] = []

        @function_tool
        def get_weather(city: str) -> str:
            """The weather in a city."""
            seen.append(city)
            return f"{RESULT} for {city}"

        async def scenario() -> str:
            client = AsyncOpenAI(base_url=proxy.url + "/v1", api_key="unused", max_retries=0)
            model = OpenAIChatCompletionsModel(model="qwen3", openai_client=client)
            agent = Agent(name="weather", instructions=INSTRUCTIONS, tools=[get_weather], model=model)
            return str((await Runner.run(agent, "Weather in Reykjavik, four times?", max_turns=6)).final_output)

        set_tracing_disabled(True)
        answer = asyncio.run(scenario())
        return answer, seen, [b["prompt"] for b in backend.bodies()]

    cached = run(64 << 20)
    assert cached[0] == ANSWER and cached[1] == [f"{CITY} {k}" for k in range(4)]
    assert len(counts) == 5 and counts[:2] == [0, 0] and all(c > 0 for c in counts[2:]), counts
    plain = run(0)
    assert plain[0] == ANSWER and cached[2] == plain[2] and len(plain[2]) == 5
