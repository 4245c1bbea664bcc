"""Recoveries real models need, over HTTP with a scripted backend: a JSON answer in a Markdown
fence when JSON was asked for, and Qwen 3.5's start state (its template opens ``<think>`` unless
thinking is turned off) following the rendered prompt."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from app.pipeline.fence import JsonFence, unfence
from parsers import Content, Reasoning, fold
from tests.conftest import QWEN3_TEMPLATE, TEMPLATES, client_for, sse_events
from tests.proxy_server import ProxyServer
from tests.scripted_backend import Script, ScriptedBackend

QWEN35 = str(TEMPLATES / "Qwen3.5-4B.jinja")
MESSAGES = [{"role": "user", "content": "Give me the answer as JSON."}]
JSON_SCHEMA = {"type": "json_schema", "json_schema": {"name": "a", "schema": {
    "type": "object", "properties": {"answer": {"type": "integer"}, "note": {"type": "string"}}}}}
FENCED = ["```", "json\n", '{"answer": 4, ', '"note": "two ``` plus two"}', "\n``", "`\n"]


def _stream(proxy: ProxyServer, **body: Any) -> tuple[str, str, list[Any]]:
    """Content and reasoning of a streamed chat completion, and its chunks."""
    response = httpx.post(proxy.url + "/v1/chat/completions", timeout=30,
                          json={"model": "x", "messages": MESSAGES, "stream": True, **body})
    assert response.status_code == 200, response.text
    chunks = [e for e in sse_events(response) if e != "[DONE]"]
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    content = "".join(d.get("content") or "" for d in deltas)
    reasoning = "".join(d.get("reasoning_content") or "" for d in deltas)
    return content, reasoning, chunks


@pytest.mark.parametrize("kind", ["vllm", "openai"])  # a generic backend cannot constrain at all
def test_a_fenced_json_answer_is_the_json(kind: str, backend_factory: Callable[..., ScriptedBackend],
                                          proxy_factory: Callable[..., ProxyServer]) -> None:
    backend = backend_factory(kind)
    proxy = proxy_factory(backend=backend.url, backend_type=kind, chat_template=str(QWEN3_TEMPLATE),
                          reasoning_parser="qwen3")
    client = client_for(proxy)
    for response_format in (JSON_SCHEMA, {"type": "json_object"}):
        backend.script(Script(pieces=FENCED))
        whole = client.chat.completions.create(model="x", messages=MESSAGES, response_format=response_format)
        content = whole.choices[0].message.content
        assert content is not None and json.loads(content) == {"answer": 4, "note": "two ``` plus two"}
        assert not content.startswith("`")
        backend.script(Script(pieces=FENCED))
        streamed, _, chunks = _stream(proxy, response_format=response_format)
        assert streamed == content
        assert all("```json" not in (c["choices"][0]["delta"].get("content") or "") for c in chunks if c["choices"])


def test_the_fence_stays_unless_json_was_asked_for_and_the_answer_is_one_block(qwen3_vllm) -> None:
    backend, proxy = qwen3_vllm
    client = client_for(proxy)
    cases = [
        ({}, FENCED, "".join(FENCED)),  # no response_format: the fence is the model's answer
        ({"response_format": JSON_SCHEMA}, ["Here:\n```json\n{}\n```"], "Here:\n```json\n{}\n```"),
        ({"response_format": JSON_SCHEMA}, ["```json\n{}\n```\nHope this helps."], "```json\n{}\n```\nHope this helps."),
        ({"response_format": JSON_SCHEMA}, ["```json\n{\"a\": \n```"], "```json\n{\"a\": \n```"),  # not JSON inside
        ({"response_format": JSON_SCHEMA}, ['{"answer": 4}'], '{"answer": 4}'),  # unfenced: streams as written
    ]
    for extra, pieces, expected in cases:
        backend.script(Script(pieces=pieces))
        whole = client.chat.completions.create(model="x", messages=MESSAGES, **extra)
        assert whole.choices[0].message.content == expected, (extra, pieces)
        backend.script(Script(pieces=pieces))
        assert _stream(proxy, **extra)[0] == expected


def test_reasoning_before_a_fenced_answer_streams_and_stays_reasoning(qwen3_vllm) -> None:
    backend, proxy = qwen3_vllm
    pieces = ["<think>\nFour.", "\n</think>\n\n", "```json\n", '{"answer": 4}', "\n```"]
    backend.script(Script(pieces=pieces))
    content, reasoning, _ = _stream(proxy, response_format=JSON_SCHEMA)
    assert (content, reasoning) == ('{"answer": 4}', "Four.")


def test_a_fenced_json_answer_with_logprobs(qwen3_vllm) -> None:
    # the fence's tokens became no content: they get no entries; the JSON's tokens do, streamed or not
    backend, proxy = qwen3_vllm
    pieces = ["```", "json\n", '{"answer": ', "4}", "\n```"]
    backend.script(Script(pieces=pieces))
    whole = client_for(proxy).chat.completions.create(model="x", messages=MESSAGES, response_format=JSON_SCHEMA,
                                                      logprobs=True)
    choice = whole.choices[0]
    assert choice.message.content == '{"answer": 4}'
    assert choice.logprobs is not None and choice.logprobs.content is not None
    assert [t.token for t in choice.logprobs.content] == ['{"answer": ', "4}"]
    backend.script(Script(pieces=pieces))
    _, _, chunks = _stream(proxy, response_format=JSON_SCHEMA, logprobs=True)
    tokens = [e["token"] for c in chunks for ch in c["choices"] if ch.get("logprobs") for e in ch["logprobs"]["content"]]
    assert tokens == ['{"answer": ', "4}"]


@pytest.mark.parametrize("text", [
    '```json\n{"a": 1}\n```', '\n```JSON\n[1, 2]\n```\n', '```\n{"a": "```"}\n```', "```json\r\n{}\r\n```",
])
def test_unfence(text: str) -> None:
    assert unfence(text) is not None


@pytest.mark.parametrize("text", [
    '{"a": 1}', '```python\n{"a": 1}\n```', '```json\n{"a": 1}\n```\n```json\n{}\n```', "```json\n{a: 1}\n```",
    '```json\n{"a": 1}', 'x```json\n{}\n```',
])
def test_unfence_leaves_anything_else(text: str) -> None:
    assert unfence(text) is None


def test_json_fence_is_the_same_in_every_split() -> None:
    text = '  ```json\n{"answer": 4}\n```  '
    for cut in range(len(text) + 1):
        fence = JsonFence()
        events = fence([Reasoning("r"), Content(text[:cut])]) + fence([Content(text[cut:])]) + fence.finish()
        assert fold(events).content == '{"answer": 4}' and fold(events).reasoning == "r"
    fence = JsonFence()
    assert fence([Content("``x")]) == [Content("``x")]  # decided at once: not a fence


# ------------------------------------------------------------------------------ Qwen 3.5's start state

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}}]
CALL = "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n2\n</parameter>\n</function>\n</tool_call>"


@pytest.fixture(scope="module")
def qwen35() -> Any:
    backend = ScriptedBackend("vllm", model="Qwen/Qwen3.5-4B").start()
    proxy = ProxyServer(backend=backend.url, chat_template=QWEN35, reasoning_parser="auto",
                        tool_call_parser="auto").start()
    yield backend, proxy
    proxy.stop()
    backend.stop()


@pytest.mark.parametrize(("switch", "tail", "pieces", "content", "reasoning"), [
    ({}, "<think>\n", ["The user", " says hi.\n</think>\n\n", "Hello!"], "Hello!", "The user says hi."),
    ({"chat_template_kwargs": {"enable_thinking": False}}, "<think>\n\n</think>\n\n", ["Hello!"], "Hello!", ""),
    ({"chat_template_kwargs": {"enable_thinking": True}}, "<think>\n", ["Hm.\n</think>\n\nHi."], "Hi.", "Hm."),
    ({"reasoning_effort": "none"}, "<think>\n\n</think>\n\n", ["Hello!"], "Hello!", ""),
    ({"reasoning_effort": "low"}, "<think>\n", ["Brief.\n</think>\n\nHello!"], "Hello!", "Brief."),
])
def test_qwen35_start_state_follows_the_rendered_prompt(qwen35: Any, switch: dict[str, Any], tail: str,
                                                        pieces: list[str], content: str, reasoning: str) -> None:
    backend, proxy = qwen35
    backend.script(Script(pieces=pieces))
    message = client_for(proxy).chat.completions.create(model="x", messages=MESSAGES, extra_body=switch).choices[0].message
    assert backend.bodies()[-1]["prompt"].endswith("<|im_start|>assistant\n" + tail)
    assert (message.content or "", getattr(message, "reasoning_content", None) or "") == (content, reasoning)
    backend.script(Script(pieces=pieces))
    assert _stream(proxy, **switch)[:2] == (content, reasoning)


@pytest.mark.parametrize(("switch", "pieces", "reasoning"), [
    ({}, ["Need the weather.\n</think>\n\n", CALL], "Need the weather."),
    ({}, [CALL], ""),  # thinking skipped: the call ends the block the prompt opened
    ({"chat_template_kwargs": {"enable_thinking": False}}, [CALL], ""),
])
def test_qwen35_calls_in_either_start_state(qwen35: Any, switch: dict[str, Any], pieces: list[str],
                                            reasoning: str) -> None:
    backend, proxy = qwen35
    backend.script(Script(pieces=pieces))
    message = client_for(proxy).chat.completions.create(model="x", messages=MESSAGES, tools=TOOLS,
                                                        extra_body=switch).choices[0].message
    assert message.content is None and (getattr(message, "reasoning_content", None) or "") == reasoning
    assert message.tool_calls is not None
    assert json.loads(message.tool_calls[0].function.arguments) == {"city": "Paris", "days": 2}


@pytest.mark.parametrize(("template", "tool_parser", "pieces", "expected"), [
    ("CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja", "cohere",
     ["<|START_RESPONSE|>", "It is ", "sunny.", "<|END_RESPONSE|>"], "It is sunny."),
    ("Kimi-K3.jinja", "kimi_k3",
     ["<|open|>response<|sep|>", "It is ", "sunny.", "<|close|>response<|sep|>", "<|close|>message<|sep|>"],
     "It is sunny."),
])
def test_the_formats_envelope_is_dropped_when_no_tools_are_offered(
        template: str, tool_parser: str, pieces: list[str], expected: str,
        backend_factory: Callable[..., ScriptedBackend], proxy_factory: Callable[..., ProxyServer]) -> None:
    """Issue 27, item 1: with no reasoning parser and no tools in the request, the tool format
    still owns its response envelope."""
    backend = backend_factory("vllm")
    proxy = proxy_factory(backend=backend.url, chat_template=str(TEMPLATES / template), tool_call_parser=tool_parser)
    backend.script(Script(pieces=pieces))
    whole = client_for(proxy).chat.completions.create(model="x", messages=MESSAGES)
    assert whole.choices[0].message.content == expected
    backend.script(Script(pieces=pieces))
    assert _stream(proxy)[0] == expected
