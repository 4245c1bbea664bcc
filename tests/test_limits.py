"""What one request may hold, on every face (Chat Completions, Responses, Messages), over HTTP:
lists counted on the raw JSON before any request model decodes them (``--max-messages``,
``--max-tools``, ``--max-input-items``), schemas and handed-back call arguments bounded in how
deeply they nest, and tool names unique. Each refusal is a 400 in the face's own error shape that
names the limit or the field — never a 500, and never after seconds of decoding."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import anthropic
import httpx
import openai
import pytest

from tests.conftest import QWEN3_TEMPLATE
from tests.proxy_server import ProxyServer
from tests.scripted_backend import ScriptedBackend

USER = {"role": "user", "content": "hi"}
DEEP = "__DEEP__"  # replaced in the encoded body: Python's json cannot write 5000 levels itself


@pytest.fixture
def limited(backend_factory: Callable[..., ScriptedBackend],
            proxy_factory: Callable[..., ProxyServer]) -> tuple[ScriptedBackend, ProxyServer]:
    backend = backend_factory("vllm", model="Qwen/Qwen3-8B")
    proxy = proxy_factory(backend=backend.url, chat_template=str(QWEN3_TEMPLATE), tool_call_parser="qwen25",
                          max_messages=5, max_tools=3, max_input_items=8)
    return backend, proxy


def send(proxy: ProxyServer, path: str, body: dict[str, Any], deep: bytes | None = None) -> tuple[int, str]:
    """The status and the error message (either face's shape) of one request."""
    data = json.dumps(body).encode()
    if deep is not None:
        data = data.replace(json.dumps(DEEP).encode(), deep)
    response = httpx.post(proxy.url + path, content=data, headers={"content-type": "application/json"}, timeout=60)
    error = response.json().get("error") if response.status_code != 200 else None
    return response.status_code, (error or {}).get("message", "")


def nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


CHAT, RESPONSES, MESSAGES = "/v1/chat/completions", "/v1/responses", "/v1/messages"
FUNCTION = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}

# bodies whose list elements are not even valid: counted first, the count is what is refused
COUNTED = [
    (CHAT, {"model": "m", "messages": [5] * 6}, "too many messages (6 > 5, --max-messages)"),
    (CHAT, {"model": "m", "messages": [USER], "tools": [5] * 4}, "too many tools (4 > 3, --max-tools)"),
    (CHAT, {"model": "m", "messages": [USER], "functions": [5] * 4}, "too many tools (4 > 3, --max-tools)"),
    (CHAT, {"model": "m", "messages": [{"role": "user", "content": [5] * 5},
                                       {"role": "assistant", "tool_calls": [5] * 4}]},
     "too many content parts and tool calls in messages (9 > 8, --max-input-items)"),
    (RESPONSES, {"model": "m", "input": [5] * 9}, "too many input items (9 > 8, --max-input-items)"),
    (RESPONSES, {"model": "m", "input": "x", "tools": [{"type": "namespace", "name": "n", "tools": [5] * 3}]},
     "too many tools (namespaced ones included) (4 > 3, --max-tools)"),
    (MESSAGES, {"model": "m", "max_tokens": 5, "messages": [5] * 6}, "too many messages (6 > 5, --max-messages)"),
    (MESSAGES, {"model": "m", "max_tokens": 5, "messages": [USER], "tools": [5] * 4},
     "too many tools (4 > 3, --max-tools)"),
    (MESSAGES, {"model": "m", "max_tokens": 5, "messages": [{"role": "assistant", "content": [5] * 9}]},
     "too many content blocks (9 > 8, --max-input-items)"),
    (MESSAGES, {"model": "m", "max_tokens": 5, "system": [5] * 3, "messages": [
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": [5] * 5}]}]},
     "too many content blocks (9 > 8, --max-input-items)"),
]


@pytest.mark.parametrize(("path", "body", "message"), COUNTED)
def test_lists_are_counted_before_they_are_decoded(limited, path: str, body: dict[str, Any], message: str) -> None:
    backend, proxy = limited
    status, text = send(proxy, path, body)
    assert (status, text) == (400, message)
    assert backend.bodies() == []


def test_a_huge_list_is_refused_at_once_on_every_face(backend_factory, proxy_factory) -> None:
    """The issue's sizes at the default limits: refused by count (the message names the flag)."""
    backend = backend_factory("vllm", model="Qwen/Qwen3-8B")
    proxy = proxy_factory(backend=backend.url, chat_template=str(QWEN3_TEMPLATE))
    cases = [
        (CHAT, {"model": "m", "messages": [USER] * 100_000}, "--max-messages"),
        (RESPONSES, {"model": "m", "input": [USER] * 100_000}, "--max-input-items"),
        (MESSAGES, {"model": "m", "max_tokens": 5, "messages": [USER] * 100_000}, "--max-messages"),
        (MESSAGES, {"model": "m", "max_tokens": 5, "messages": [USER, {"role": "assistant", "content": [
            {"type": "tool_use", "id": "t", "name": "f", "input": {}}] * 60_000}, USER]}, "--max-input-items"),
        (MESSAGES, {"model": "m", "max_tokens": 5, "messages": [USER],
                    "tools": [{"name": "f", "input_schema": {}}] * 30_000}, "--max-tools"),
    ]
    for path, body, flag in cases:
        status, text = send(proxy, path, body)
        assert status == 400 and flag in text, (path, text)


# ------------------------------------------------------------------------- nesting, every face

DEEP_FORMATS = [
    (CHAT, {"model": "m", "messages": [USER], "response_format": {
        "type": "json_schema", "json_schema": {"name": "r", "schema": {"type": "object", "properties": {"a": DEEP}}}}},
     "response_format.json_schema.schema is nested too deeply"),
    (RESPONSES, {"model": "m", "input": "x", "text": {"format": {
        "type": "json_schema", "name": "r", "schema": {"type": "object", "properties": {"a": DEEP}}}}},
     "text.format.schema is nested too deeply"),
    (MESSAGES, {"model": "m", "max_tokens": 5, "messages": [USER], "output_config": {"format": {
        "type": "json_schema", "schema": {"type": "object", "properties": {"a": DEEP}}}}},
     "output_config.format.schema is nested too deeply"),
]


@pytest.mark.parametrize(("path", "body", "message"), DEEP_FORMATS)
def test_a_deep_response_format_is_a_400(limited, path: str, body: dict[str, Any], message: str) -> None:
    backend, proxy = limited
    status, text = send(proxy, path, body, nested(300))
    assert status == 400 and text.startswith(message), text
    assert backend.bodies() == []


CALL_ID = "call_deep"
DEEP_ARGUMENTS = [
    (CHAT, {"model": "m", "messages": [USER, {"role": "assistant", "tool_calls": [
        {"id": CALL_ID, "type": "function", "function": {"name": "f", "arguments": "__TEXT__"}}]},
        {"role": "tool", "tool_call_id": CALL_ID, "content": "ok"}]}, "text"),
    (RESPONSES, {"model": "m", "input": [USER, {"type": "function_call", "call_id": CALL_ID, "name": "f",
                                                "arguments": "__TEXT__"},
                                         {"type": "function_call_output", "call_id": CALL_ID, "output": "ok"}]},
     "text"),
    (MESSAGES, {"model": "m", "max_tokens": 5, "messages": [USER, {"role": "assistant", "content": [
        {"type": "tool_use", "id": CALL_ID, "name": "f", "input": {"a": DEEP}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": CALL_ID, "content": "ok"}]}]}, "json"),
]


@pytest.mark.parametrize(("path", "body", "form"), DEEP_ARGUMENTS)
def test_deep_call_arguments_handed_back_are_a_400(limited, path: str, body: dict[str, Any], form: str) -> None:
    """Arguments of 5000 nested arrays as JSON text (chat, Responses), 1000 as a JSON object
    (Messages, as deep as the body's parser allows): a 400, not a RecursionError's 500."""
    backend, proxy = limited
    if form == "text":
        encoded = json.dumps(body).replace('"__TEXT__"', json.dumps(nested(5000).decode())).encode()
        response = httpx.post(proxy.url + path, content=encoded, headers={"content-type": "application/json"},
                              timeout=60)
        status, text = response.status_code, response.json().get("error", {}).get("message", "")
    else:
        status, text = send(proxy, path, body, nested(1000))
    assert status == 400 and f"tool call '{CALL_ID}'" in text and "nested too deeply" in text, text
    assert backend.bodies() == []


def test_arguments_nested_within_the_bound_still_render(limited) -> None:
    backend, proxy = limited
    body = json.dumps(DEEP_ARGUMENTS[0][1]).replace('"__TEXT__"', json.dumps(json.dumps({"a": [[[1]]]})))
    response = httpx.post(proxy.url + CHAT, content=body, headers={"content-type": "application/json"}, timeout=60)
    assert response.status_code == 200, response.text
    assert '"a": [[[1]]]' in backend.bodies()[-1]["prompt"]


# ------------------------------------------------------------------------------ tool names


def test_two_tools_of_one_name_are_a_400_on_every_face(limited) -> None:
    backend, proxy = limited
    with pytest.raises(openai.BadRequestError) as chat:
        openai.OpenAI(base_url=proxy.url + "/v1", api_key="x", max_retries=0).chat.completions.create(
            model="m", messages=[USER], tools=[FUNCTION, FUNCTION])  # type: ignore[list-item]
    assert "tools[1].function.name: two tools are named 'f'" in chat.value.message
    with pytest.raises(openai.BadRequestError) as responses:
        openai.OpenAI(base_url=proxy.url + "/v1", api_key="x", max_retries=0).responses.create(
            model="m", input="x", tools=[{"type": "function", "name": "f", "parameters": {}}] * 2)  # type: ignore[list-item]
    assert "two tools are named 'f'" in responses.value.message
    messages = anthropic.Anthropic(base_url=proxy.url, api_key="x", max_retries=0)
    tool = {"name": "f", "input_schema": {"type": "object"}}
    for tools in ([tool, tool], [tool, {**tool, "defer_loading": True}]):  # a deferred twin counts too
        with pytest.raises(anthropic.BadRequestError) as refused:
            messages.messages.create(model="m", max_tokens=5, messages=[USER], tools=tools)  # type: ignore[arg-type]
        assert "tools[1].name: two tools are named 'f'" in str(refused.value)
    assert backend.bodies() == []
