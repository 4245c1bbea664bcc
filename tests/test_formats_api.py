"""Issue 39's format classes over HTTP: a real app with a model's chat template and a scripted backend,
streamed and whole (the parsers' own cases are fixtures in ``tests/fixtures``)."""

from __future__ import annotations

import json
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


def test_a_call_list_cut_by_max_tokens_reads_the_same_everywhere(backend_factory: Callable[..., ScriptedBackend],
                                                                 proxy_factory: Callable[..., ProxyServer]) -> None:
    """``tool_choice: required`` on vLLM (the answer is a JSON array) cut by max_tokens in its third
    call: on every face, streamed or whole, the two complete calls are calls, the cut one is never a
    finished call, and the finish reason says the output was cut (issue 39, item 7: the whole
    answer had no call, the stream all three, and the streamed response.output listed them)."""
    backend = backend_factory("vllm")
    proxy = proxy_factory(backend=backend.url, chat_template=str(TEMPLATES / "Qwen-Qwen2.5-7B-Instruct.jinja"),
                          tool_call_parser="qwen25")
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    pieces = ['[{"name": "get_weather", "arguments": {"city": "Tokyo"}}, ',
              '{"name": "get_weather", "arguments": {"city": "Berlin"}}, ', '{"name": "get_weather", "arguments": {"ci']
    complete = [("get_weather", '{"city": "Tokyo"}'), ("get_weather", '{"city": "Berlin"}')]
    chat = {"model": "x", "messages": MESSAGES, "tools": [_tool("get_weather", schema["properties"])],
            "tool_choice": "required", "max_tokens": 64}

    def cut() -> None:
        backend.script(Script(pieces=pieces, finish="length"))

    cut()
    whole = httpx.post(proxy.url + "/v1/chat/completions", json=chat, timeout=30).json()["choices"][0]
    assert [(c["function"]["name"], c["function"]["arguments"]) for c in whole["message"]["tool_calls"]] == complete
    assert whole["finish_reason"] == "length"
    for hold in (False, True):
        cut()
        response = httpx.post(proxy.url + "/v1/chat/completions", timeout=30,
                              json={**chat, "stream": True, "hold_tool_calls": hold})
        chunks = [c for c in sse_events(response) if c != "[DONE]" and c["choices"]]
        calls: dict[int, list[str]] = {}
        for chunk in chunks:
            for call in chunk["choices"][0]["delta"].get("tool_calls") or []:
                calls.setdefault(call["index"], ["", ""])
                calls[call["index"]][0] = call["function"].get("name") or calls[call["index"]][0]
                calls[call["index"]][1] += call["function"].get("arguments") or ""
        assert [tuple(calls[i]) for i in (0, 1)] == complete
        assert len(calls) == (2 if hold else 3)  # the cut call streamed in part, flagged by "length"
        assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    responses = {"model": "x", "input": "Go.", "tool_choice": "required", "max_output_tokens": 64,
                 "tools": [{"type": "function", "name": "get_weather", "parameters": schema}]}
    finals = []
    for stream in (False, True):
        cut()
        response = httpx.post(proxy.url + "/v1/responses", json={**responses, "stream": stream}, timeout=30)
        if stream:
            events = [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: ")]
            finals.append(events[-1]["response"])
            assert events[-1]["type"] == "response.incomplete"
        else:
            finals.append(response.json())
    for final in finals:
        assert final["status"] == "incomplete"
        assert [(o["type"], o["name"], o["arguments"], o["status"]) for o in final["output"]] == [
            ("function_call", name, args, "completed") for name, args in complete]
    messages = {"model": "x", "max_tokens": 64, "messages": MESSAGES, "tool_choice": {"type": "any"},
                "tools": [{"name": "get_weather", "input_schema": schema}]}
    cut()
    whole_message = _anthropic(proxy).messages.create(**messages)
    assert [(b.type, b.input) for b in whole_message.content] == [("tool_use", {"city": "Tokyo"}),
                                                                   ("tool_use", {"city": "Berlin"})]
    assert whole_message.stop_reason == "max_tokens"
    cut()
    streamed = httpx.post(proxy.url + "/v1/messages", json={**messages, "stream": True}, timeout=30)
    events = [json.loads(line[6:]) for line in streamed.text.splitlines() if line.startswith("data: ")]
    inputs: dict[int, str] = {}
    for item in events:
        if item["type"] == "content_block_delta":
            inputs[item["index"]] = inputs.get(item["index"], "") + item["delta"]["partial_json"]
    assert [inputs[0], inputs[1]] == [args for _, args in complete]
    assert [e["delta"]["stop_reason"] for e in events if e["type"] == "message_delta"] == ["max_tokens"]
