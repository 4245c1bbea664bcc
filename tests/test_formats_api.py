"""Issue 39's format classes over HTTP: a real app with a model's chat template and a scripted backend,
streamed and whole (the parsers' own cases are fixtures in ``tests/fixtures``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx

from tests.conftest import TEMPLATES, client_for, sse_events
from tests.proxy_server import ProxyServer
from tests.scripted_backend import Script, ScriptedBackend

MESSAGES = [{"role": "user", "content": "Go."}]


def _tool(name: str, properties: dict[str, Any]) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "parameters": {"type": "object", "properties": properties}}}


def _streamed_calls(proxy: ProxyServer, tools: list[dict[str, Any]]) -> tuple[str, list[tuple[str, str]], str | None]:
    """Content, calls (name, arguments) and finish reason of a streamed chat completion."""
    response = httpx.post(proxy.url + "/v1/chat/completions", timeout=30,
                          json={"model": "x", "messages": MESSAGES, "tools": tools, "stream": True})
    assert response.status_code == 200, response.text
    content, calls, finish = "", {}, None
    for chunk in sse_events(response):
        if chunk == "[DONE]" or not chunk["choices"]:
            continue
        choice = chunk["choices"][0]
        content += choice["delta"].get("content") or ""
        finish = choice["finish_reason"] or finish
        for call in choice["delta"].get("tool_calls") or []:
            entry = calls.setdefault(call["index"], ["", ""])
            entry[0] = call["function"].get("name") or entry[0]
            entry[1] += call["function"].get("arguments") or ""
    return content, [(name, args) for name, args in calls.values()], finish


def test_reasoning_parser_none_reads_functionary_v31_calls(backend_factory: Callable[..., ScriptedBackend],
                                                           proxy_factory: Callable[..., ProxyServer]) -> None:
    """``--reasoning-parser none`` is a name (no reasoning parser); functionary v3.1's calls and its
    python tag come out (issue 39, item 4: the name was refused, so no call came out)."""
    backend = backend_factory("vllm")
    proxy = proxy_factory(backend=backend.url, chat_template=str(TEMPLATES / "meetkai-functionary-medium-v3.1.jinja"),
                          reasoning_parser="none", tool_call_parser="auto")
    tools = [_tool("special_function", {"arg1": {"type": "integer"}}), _tool("python", {"code": {"type": "string"}})]
    output = ['<function=special_function>{"arg1": ', '1}</function>', "<|python_tag|>print(", "'hey')"]
    expected = [("special_function", '{"arg1": 1}'), ("python", '{"code": "print(\'hey\')"}')]
    backend.script(Script(pieces=output))
    whole = client_for(proxy).chat.completions.create(model="x", messages=MESSAGES, tools=tools)  # type: ignore[arg-type]
    message = whole.choices[0].message
    assert [(c.function.name, c.function.arguments) for c in message.tool_calls or []] == expected
    assert not message.content and whole.choices[0].finish_reason == "tool_calls"
    backend.script(Script(pieces=output))
    assert _streamed_calls(proxy, tools) == ("", expected, "tool_calls")


def test_minimax_m3_union_call_comes_out(backend_factory: Callable[..., ScriptedBackend],
                                         proxy_factory: Callable[..., ProxyServer]) -> None:
    """MiniMax-M3 picked by ``auto``: a union parameter written as elements is the object they spell,
    a union scalar its JSON value (issue 39, items 2 and 3: the call failed, its markup in content)."""
    backend = backend_factory("vllm")
    proxy = proxy_factory(backend=backend.url, chat_template=str(TEMPLATES / "MiniMax-M3.jinja"),
                          reasoning_parser="auto", tool_call_parser="auto")
    ns = "]<]minimax[>["
    tools = [_tool("union_args", {"label": {"oneOf": [{"type": "string"}, {"type": "object"}]},
                                  "limit": {"type": ["string", "integer"]}})]
    output = [f"<mm:think>Union</mm:think>{ns}<tool_call>\n{ns}<invoke name=\"union_args\">{ns}<label>",
              f"{ns}<text>hi{ns}</text>{ns}</label>{ns}<limit>5{ns}</limit>{ns}</invoke>\n{ns}</tool_call>"]
    expected = [("union_args", '{"label": {"text": "hi"}, "limit": 5}')]
    backend.script(Script(pieces=output))
    whole = client_for(proxy).chat.completions.create(model="x", messages=MESSAGES, tools=tools)  # type: ignore[arg-type]
    message = whole.choices[0].message
    assert [(c.function.name, c.function.arguments) for c in message.tool_calls or []] == expected
    assert not message.content
    backend.script(Script(pieces=output))
    assert _streamed_calls(proxy, tools) == ("", expected, "tool_calls")


def test_a_prefilled_thought_and_text_continue_on_each_face(backend_factory: Callable[..., ScriptedBackend],
                                                            proxy_factory: Callable[..., ProxyServer]) -> None:
    """A final assistant message's thought and text are rendered with the reasoning format's markers
    after a generation prompt that opened the thought (Qwen 3.5), on Chat Completions and on Messages;
    the answer is what the model adds (issue 39, item 6: the thought was dropped and the text landed
    inside the open thought, so the answer came back as reasoning)."""
    backend = backend_factory("vllm")
    proxy = proxy_factory(backend=backend.url, chat_template=str(TEMPLATES / "Qwen3.5-4B.jinja"),
                          reasoning_parser="auto", tool_call_parser="auto")
    client = client_for(proxy)
    thinking = {"chat_template_kwargs": {"enable_thinking": True}, "continue_final_message": True}
    prefilled = [*MESSAGES, {"role": "assistant", "content": "Hello, ", "reasoning_content": "I'm thinking"}]
    backend.script(Script(pieces=["world", "!"]))
    answer = client.chat.completions.create(model="x", messages=prefilled, extra_body=thinking)  # type: ignore[arg-type]
    assert backend.bodies()[-1]["prompt"].endswith("<|im_start|>assistant\n<think>\nI'm thinking</think>Hello, ")
    assert answer.choices[0].message.content == "world!"
    assert getattr(answer.choices[0].message, "reasoning_content", None) is None
    # a thought with no text yet goes on: the model's words are reasoning until it closes it
    going_on = [*MESSAGES, {"role": "assistant", "content": "", "reasoning_content": "I'm"}]
    backend.script(Script(pieces=[" thinking\n</think>\n\n", "Hello!"]))
    answer = client.chat.completions.create(model="x", messages=going_on, extra_body=thinking)  # type: ignore[arg-type]
    assert backend.bodies()[-1]["prompt"].endswith("<think>\nI'm")
    assert answer.choices[0].message.content == "Hello!"
    assert answer.choices[0].message.reasoning_content == " thinking"  # type: ignore[attr-defined]
    # Messages: a signed thinking block handed back, and text, as the prefill
    anthropic_client = _anthropic(proxy)
    backend.script(Script(pieces=["I'm thinking\n</think>\n\nHi."]))
    first = anthropic_client.messages.create(model="x", max_tokens=64, messages=MESSAGES,  # type: ignore[arg-type]
                                             thinking={"type": "enabled", "budget_tokens": 32})
    thought = first.content[0]
    assert thought.type == "thinking" and thought.thinking == "I'm thinking"
    prefill = {"role": "assistant", "content": [{"type": "thinking", "thinking": thought.thinking,
                                                  "signature": thought.signature},
                                                 {"type": "text", "text": "Hello, "}]}
    for stream in (False, True):
        backend.script(Script(pieces=["world", "!"]))
        kwargs: dict[str, Any] = {"model": "x", "max_tokens": 64, "messages": [*MESSAGES, prefill],
                                  "thinking": {"type": "enabled", "budget_tokens": 32}}
        if stream:
            with anthropic_client.messages.stream(**kwargs) as events:
                message = events.get_final_message()
        else:
            message = anthropic_client.messages.create(**kwargs)
        assert backend.bodies()[-1]["prompt"].endswith("<think>\nI'm thinking</think>Hello, ")
        assert [(b.type, getattr(b, "text", None)) for b in message.content] == [("text", "world!")]


def _anthropic(proxy: ProxyServer) -> Any:
    import anthropic

    return anthropic.Anthropic(base_url=proxy.url, api_key="unused", max_retries=0, timeout=30)
