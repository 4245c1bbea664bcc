"""Forced tool calls on vLLM (issue #13, item 4): the backend is asked for JSON; when it does not
apply that constraint (an old vLLM, a misconfigured server) the model's own markup comes back, and
it is parsed in the model's own format — no marker text reaches the client. A reasoning model whose
prompt opened a thinking block thinks first: the structural tag leaves that block free.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.conftest import TEMPLATES, client_for
from tests.scripted_backend import Script

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
MESSAGES = [{"role": "user", "content": "Weather in Paris?"}]
NAMED = {"type": "function", "function": {"name": "get_weather"}}
THINKING = {"chat_template_kwargs": {"enable_thinking": True}}  # this QwQ template closes <think> without it
MARKERS = ("<think>", "</think>", "<tool_call>", "</tool_call>")


def ask(proxy: Any, tool_choice: Any, stream: bool,
        extra_body: dict[str, Any] | None = None) -> tuple[str, str, list[tuple[str, dict[str, Any]]], str]:
    """(content, reasoning, calls, finish_reason) of one request through the openai client."""
    client = client_for(proxy)
    if not stream:
        choice = client.chat.completions.create(model="m", messages=MESSAGES, tools=TOOLS,
                                                tool_choice=tool_choice, extra_body=extra_body).choices[0]
        message = choice.message
        calls = [(c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls or ()]
        reasoning = (message.model_extra or {}).get("reasoning_content") or ""
        return message.content or "", reasoning, calls, choice.finish_reason
    content, reasoning, finish = "", "", ""
    names: dict[int, str] = {}
    args: dict[int, str] = {}
    for chunk in client.chat.completions.create(model="m", messages=MESSAGES, tools=TOOLS, tool_choice=tool_choice,
                                                stream=True, extra_body=extra_body):
        for choice in chunk.choices:
            delta = choice.delta
            content += delta.content or ""
            reasoning += (delta.model_extra or {}).get("reasoning_content") or ""
            for call in delta.tool_calls or ():
                if call.function and call.function.name:
                    names[call.index] = call.function.name
                args[call.index] = args.get(call.index, "") + ((call.function and call.function.arguments) or "")
            finish = choice.finish_reason or finish
    return content, reasoning, [(names[i], json.loads(args[i])) for i in sorted(names)], finish


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(("tool_choice", "honoured"), [
    ("required", '[{"name": "get_weather", "arguments": {"city": "Paris"}}]'),
    (NAMED, '{"city": "Paris"}'),
])
def test_constraint_honoured_or_ignored(qwen3_vllm, tool_choice: Any, honoured: str, stream: bool) -> None:
    backend, proxy = qwen3_vllm
    backend.script(Script(pieces=[honoured[:5], honoured[5:]]))
    assert ask(proxy, tool_choice, stream)[2] == [("get_weather", {"city": "Paris"})]
    # the backend ignored the constraint: the model wrote its own markup, thinking first
    ignored = '<think>Paris, so get_weather.</think>\n\n<tool_call>\n{"name": "get_weather", ' \
              '"arguments": {"city": "Paris"}}\n</tool_call>'
    backend.script(Script(pieces=[ignored[i:i + 7] for i in range(0, len(ignored), 7)]))
    content, reasoning, calls, finish = ask(proxy, tool_choice, stream)
    assert calls == [("get_weather", {"city": "Paris"})]
    assert reasoning == "Paris, so get_weather."
    assert not any(m in content + reasoning for m in MARKERS)
    assert finish == "tool_calls" if tool_choice == "required" else finish in ("tool_calls", "stop")


def test_ignored_constraint_is_logged_once(qwen3_vllm, monkeypatch, caplog) -> None:
    from app.pipeline import run

    monkeypatch.setitem(run._WARNED, "constraint_ignored", False)
    backend, proxy = qwen3_vllm
    ignored = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    for _ in range(2):
        backend.script(Script(pieces=[ignored]))
        assert ask(proxy, "required", False)[2] == [("get_weather", {"city": "Paris"})]
    assert sum("did not apply the tool-call constraint" in r.getMessage() for r in caplog.records) == 1


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("tool_choice", ["required", NAMED])
def test_a_reasoning_model_thinks_before_its_forced_call(backend_factory, proxy_factory, tool_choice: Any,
                                                          stream: bool) -> None:
    backend = backend_factory("vllm", model="Qwen/QwQ-32B")
    proxy = proxy_factory(backend=backend.url, chat_template=str(TEMPLATES / "Qwen-QwQ-32B.jinja"),
                          reasoning_parser="deepseek-r1", tool_call_parser="qwen25")
    body = '[{"name": "get_weather", "arguments": {"city": "Paris"}}]' if tool_choice == "required" \
        else '{"city": "Paris"}'
    thought = "The user wants Paris.\n</think>\n\n"
    own = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    for output, said in ((thought + body, "The user wants Paris."),  # as constrained: thinking, then the JSON
                         (thought + own, "The user wants Paris."),  # the tag ignored: the model's own format
                         (body, "")):  # a backend that skipped the thinking block
        backend.script(Script(pieces=[output[i:i + 5] for i in range(0, len(output), 5)]))
        content, reasoning, calls, _ = ask(proxy, tool_choice, stream, THINKING)
        assert calls == [("get_weather", {"city": "Paris"})]
        assert reasoning.strip() == said
        assert not any(m in content + reasoning for m in MARKERS) and not content.strip()
        sent = backend.bodies()[-1]
        assert backend.bodies()[-1]["prompt"].rstrip().endswith("<think>")
        tag = json.loads(sent["structured_outputs"]["structural_tag"])
        first, second = tag["format"]["elements"]
        assert first == {"type": "tag", "begin": "", "content": {"type": "any_text"}, "end": "</think>"}
        assert second["type"] == "json_schema"


def test_no_reasoning_prefix_when_the_prompt_did_not_open_thinking(qwen3_vllm) -> None:
    backend, proxy = qwen3_vllm
    backend.script(Script(pieces=['{"city": "Paris"}']))
    ask(proxy, NAMED, False)
    assert "json" in backend.bodies()[-1]["structured_outputs"]  # the Qwen3 template leaves <think> to the model
