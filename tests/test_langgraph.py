"""LangGraph's ``create_react_agent`` on LangChain's ``ChatOpenAI`` completes a tool round trip through
toolwire's ``/v1/chat/completions`` in front of a scripted backend: the model calls the tool, the
graph runs it and sends the history back — the call-only assistant turn with ``"content": null``, as
``langchain-openai`` serialises it, and the tool result — and the model's plain answer ends the run.
Once with ``invoke`` and once with ``stream`` (``stream_mode="messages"``: token by token, so the
model is called with ``stream: true``)."""

from __future__ import annotations

import json
import warnings
from typing import Any

import httpx
import pytest
from langchain_core.messages import AIMessage, AIMessageChunk, ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.prebuilt import create_react_agent

from tests.agent_round_trip import CITY, INSTRUCTIONS, check_call_only_round_trip
from tests.agent_round_trip import scripted_model as agent_scripted_model
from tests.conftest import QWEN3_TEMPLATE

RESULT = "RESULT-drizzle-7083"
ANSWER = f"It drizzles in {CITY}."
scripted_model = agent_scripted_model(RESULT, ANSWER)


@pytest.mark.parametrize("streamed", [False, True])
def test_langgraph_react_agent_round_trip(streamed: bool, backend_factory, proxy_factory) -> None:
    backend = backend_factory("vllm", model="Qwen/Qwen3-8B")
    backend.responder = scripted_model
    proxy = proxy_factory(backend=backend.url, chat_template=str(QWEN3_TEMPLATE), reasoning_parser="qwen3",
                          tool_call_parser="qwen25")
    ran: list[str] = []
    sent: list[dict[str, Any]] = []  # the request bodies ChatOpenAI sent to toolwire

    def record(request: httpx.Request) -> None:
        if request.url.path.endswith("/chat/completions"):
            sent.append(json.loads(request.content))

    @tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        ran.append(city)
        return RESULT

    question = {"messages": [{"role": "user", "content": "Weather in Reykjavik?"}]}
    bounded = {"recursion_limit": 4}  # model → tools → model; a model that keeps calling fails at once
    with httpx.Client(event_hooks={"request": [record]}, timeout=30) as http:
        model = ChatOpenAI(model="qwen3", base_url=proxy.url + "/v1", api_key="unused",
                           max_retries=0, http_client=http)
        with warnings.catch_warnings():  # LangGraph 1.x deprecates it for langchain's create_agent; still the API in use
            warnings.simplefilter("ignore", DeprecationWarning)
            agent = create_react_agent(model, [get_weather], prompt=INSTRUCTIONS)
        if streamed:
            chunks: list[AIMessageChunk] = []
            state: dict[str, Any] = {}
            for mode, data in agent.stream(question, bounded, stream_mode=["messages", "values"]):
                if mode == "messages" and isinstance(data[0], AIMessageChunk):
                    chunks.append(data[0])
                elif mode == "values":
                    state = data
            messages = state["messages"]
            # the answer arrived token by token, and the call as tool-call chunks
            assert "".join(c.text for c in chunks) == ANSWER
            assert sum(1 for c in chunks if c.text) >= 2
            assert any(tc.get("name") == "get_weather" for c in chunks for tc in c.tool_call_chunks)
        else:
            messages = agent.invoke(question, bounded)["messages"]

    assert ran == [CITY]  # the graph ran the tool the model called
    final = messages[-1]
    assert isinstance(final, AIMessage) and final.content == ANSWER and not final.tool_calls
    call_turn = next(m for m in messages if isinstance(m, AIMessage) and m.tool_calls)
    assert call_turn.tool_calls[0]["name"] == "get_weather" and call_turn.tool_calls[0]["args"] == {"city": CITY}
    result = next(m for m in messages if isinstance(m, ToolMessage))
    assert result.content == RESULT and result.tool_call_id == call_turn.tool_calls[0]["id"]

    # what ChatOpenAI sent (the call-only turn as content null) and what reached the backend
    check_call_only_round_trip(sent, backend, RESULT, streamed)
