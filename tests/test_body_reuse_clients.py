"""The official clients through a long agent loop, where each request body is parsed past what the
last one held (``app.bodies``): call-only turns handed back as the SDK serialises them
(``content: null`` on Chat), the tool results, the final answer — on a server with the prefix
service and one without, whose backends must get the same prompts."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import httpx

from tests.conftest import QWEN3_TEMPLATE, client_for
from tests.scripted_backend import Script

#: a system prompt long enough that every body passes ``app.bodies``' least size (2 KB)
SYSTEM = "You are a careful coding agent. Read before you edit; run the tests after. «é» " * 40
TURNS = 6
TOOLS = [{"type": "function", "function": {
    "name": "read_file", "description": "Read a file",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}}]


def _respond(body: dict[str, Any]) -> Script:
    """A call to ``read_file`` until ``TURNS`` results are in the prompt, then the answer."""
    prompt: str = body["prompt"]
    done = prompt.count("<tool_response>")
    if done >= TURNS:
        return Script(pieces=["<think>\nDone.\n</think>\n\n", "All ", "fixed."])
    call = json.dumps({"name": "read_file", "arguments": {"path": f"src/module_{done}.py"}})
    return Script(pieces=["<think>\nRead it.\n</think>\n\n", "<tool_call>\n", call[:11], call[11:], "\n</tool_call>"])


def _servers(backend_factory: Any, proxy_factory: Any) -> list[tuple[Any, Any]]:
    pairs = []
    for cache in (64 << 20, 0):
        backend = backend_factory("vllm", model="Qwen/Qwen3-8B")
        backend.responder = _respond
        proxy = proxy_factory(backend=backend.url, chat_template=str(QWEN3_TEMPLATE), reasoning_parser="qwen3",
                              tool_call_parser="qwen25", prefix_cache_bytes=cache)
        pairs.append((backend, proxy))
    return pairs


def test_openai_chat_agent_loop_with_bodies_reused(backend_factory, proxy_factory) -> None:
    pairs = _servers(backend_factory, proxy_factory)
    answers = []
    for _, proxy in pairs:
        client = client_for(proxy)
        messages: list[Any] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Fix the bug."}]
        for _ in range(TURNS + 1):
            reply = client.chat.completions.create(model="m", messages=messages, tools=TOOLS).choices[0].message
            if not reply.tool_calls:
                break
            assert reply.content is None  # a call-only turn, handed back with "content": null
            messages.append(reply)
            call = reply.tool_calls[0]
            path = json.loads(call.function.arguments)["path"]
            messages.append({"role": "tool", "tool_call_id": call.id, "content": f"contents of {path}\n" * 20})
        answers.append(reply.content)
    assert answers == ["All fixed."] * 2
    on, off = ([body["prompt"] for body in backend.bodies()] for backend, _ in pairs)
    assert len(on) == TURNS + 1 and on == off
    assert pairs[0][1].runtime.services.prefix.elements_reused > 0  # parsed past what the last body held


def test_anthropic_messages_agent_loop_with_bodies_reused(backend_factory, proxy_factory) -> None:
    pairs = _servers(backend_factory, proxy_factory)
    tools = [{"name": "read_file", "description": "Read a file", "input_schema": TOOLS[0]["function"]["parameters"]}]
    answers = []
    for _, proxy in pairs:
        client = anthropic.Anthropic(base_url=proxy.url, api_key="unused", max_retries=0, timeout=60)
        messages: list[Any] = [{"role": "user", "content": "Fix the bug."}]
        for _ in range(TURNS + 1):
            reply = client.messages.create(model="m", max_tokens=256, system=SYSTEM, messages=messages, tools=tools)
            uses = [block for block in reply.content if block.type == "tool_use"]
            if not uses:
                break
            messages.append({"role": "assistant", "content": reply.content})
            messages.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": uses[0].id, "content": f"contents of {uses[0].input['path']}"},
                {"type": "text", "text": "<system-reminder>keep going</system-reminder>"}]})
        answers.append("".join(block.text for block in reply.content if block.type == "text"))
    assert answers == ["All fixed."] * 2
    on, off = ([body["prompt"] for body in backend.bodies()] for backend, _ in pairs)
    assert len(on) == TURNS + 1 and on == off
    assert pairs[0][1].runtime.services.prefix.elements_reused > 0


def test_a_legacy_function_message_joining_a_reused_conversation(backend_factory, proxy_factory) -> None:
    """A conversation whose bodies are reused turn after turn, joined by a message of the deprecated
    function calling (a ``function`` result): it is read as such, across the whole conversation,
    although the elements before it were known — the same prompt as a server without the service."""
    pairs = _servers(backend_factory, proxy_factory)
    for _, proxy in pairs:
        messages: list[Any] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Fix the bug."}]
        for turn in range(5):
            if turn == 3:  # the client falls back to the old shape for one result
                messages += [{"role": "assistant", "content": None,
                              "function_call": {"name": "read_file", "arguments": '{"path": "x.py"}'}},
                             {"role": "function", "name": "read_file", "content": "contents of x.py"}]
            service = proxy.runtime.services.prefix
            recalls = service.recalls
            response = httpx.post(proxy.url + "/v1/chat/completions", timeout=60, json={
                "model": "m", "messages": messages, "tools": TOOLS})
            assert response.status_code == 200, response.text
            if turn >= 3:  # decoded across its messages: never from, nor into, the service
                assert service.recalls == recalls
            reply = response.json()["choices"][0]["message"]
            messages += [reply, {"role": "tool", "tool_call_id": reply["tool_calls"][0]["id"], "content": "ok " * 30}]
    on, off = ([body["prompt"] for body in backend.bodies()] for backend, _ in pairs)
    assert len(on) == 5 and on == off and "contents of x.py" in on[-1]
    assert pairs[0][1].runtime.services.prefix.elements_reused > 0
