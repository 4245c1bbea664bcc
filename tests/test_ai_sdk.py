"""The AI SDK itself (npm ``ai`` 7, ``@ai-sdk/openai`` 4, on the Node 22 it needs; cached from npm
by ``tests/ai_sdk.py``) runs a tool loop through toolwire's Responses API in front of a scripted
Qwen3 backend, with its defaults: ``store`` unset, so step 2 refers to step 1's reasoning and
message items by ``item_reference`` — and, with the provider's ``conversation`` option, in a
toolwire conversation. Skipped where npm (or x86-64 Linux) is not there."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.ai_sdk import ensure_ai_sdk, run_tool_loop
from tests.conftest import QWEN3_TEMPLATE
from tests.scripted_backend import Script

KEY = "sk-ai-sdk"
THOUGHT = "The weather tool knows: ai-sdk-thought-5."
ANSWER = "It is sunny in Oslo, 21 degrees."


def scripted_model(body: dict[str, Any]) -> Script:
    """A call (after reasoning and a line of text) until the tool's result is in the prompt's last
    turn, then the answer."""
    prompt: str = body["prompt"]
    if '"forecast":"sunny"' in prompt[prompt.rfind("<|im_start|>user"):]:
        return Script(pieces=["<think>\nGot it.\n</think>\n\n", ANSWER[:10], ANSWER[10:]])
    call = json.dumps({"name": "weather", "arguments": {"city": "Oslo"}})
    return Script(pieces=["<think>", f"\n{THOUGHT}\n", "</think>", "\n\n", "Checking.\n", "<tool_call>\n",
                          call[:20], call[20:], "\n</tool_call>"])


@pytest.fixture
def node() -> Path:
    binary = ensure_ai_sdk()
    if binary is None:
        pytest.skip("npm (on x86-64 Linux) is needed to install the AI SDK and Node 22")
    return binary


@pytest.mark.parametrize("mode", ["generate", "stream"])
def test_the_ai_sdk_tool_loop_with_its_default_item_references(node: Path, mode: str, backend_factory,
                                                               proxy_factory) -> None:
    backend = backend_factory("vllm", model="Qwen/Qwen3-8B")
    backend.responder = scripted_model
    proxy = proxy_factory(backend=backend.url, chat_template=str(QWEN3_TEMPLATE), reasoning_parser="qwen3",
                          tool_call_parser="qwen25", api_key=[KEY])
    report = run_tool_loop(node, proxy.url + "/v1", KEY, MODE=mode)
    assert report["text"] == ANSWER and report["ran"] == ["Oslo"] and report["steps"] == 2
    first, second = report["sent"]
    assert "store" not in first and "previous_response_id" not in second
    kinds = [item.get("type") for item in second["input"]]
    assert kinds == [None, "item_reference", "item_reference", "function_call", "function_call_output"]
    assert [item["id"][:3] for item in second["input"][1:3]] == ["rs_", "msg"]
    prompt = backend.bodies()[-1]["prompt"]
    assert THOUGHT in prompt and "Checking." in prompt  # the references, resolved from the store
    assert prompt.index(THOUGHT) < prompt.index('"forecast":"sunny"')


def test_the_ai_sdk_tool_loop_in_a_conversation(node: Path, backend_factory, proxy_factory) -> None:
    backend = backend_factory("vllm", model="Qwen/Qwen3-8B")
    backend.responder = scripted_model
    proxy = proxy_factory(backend=backend.url, chat_template=str(QWEN3_TEMPLATE), reasoning_parser="qwen3",
                          tool_call_parser="qwen25", api_key=[KEY])
    headers = {"authorization": f"Bearer {KEY}"}
    conversation = httpx.post(proxy.url + "/v1/conversations", json={}, headers=headers, timeout=30).json()["id"]
    report = run_tool_loop(node, proxy.url + "/v1", KEY, MODE="stream", CONVERSATION=conversation)
    assert report["text"] == ANSWER and report["ran"] == ["Oslo"]
    assert all(body["conversation"] == conversation for body in report["sent"])
    # step 2 leaves out what the conversation holds (items with ids), but sends the prompt again: it has none
    assert [item.get("type") for item in report["sent"][1]["input"]] == [None, "function_call_output"]
    items = httpx.get(f"{proxy.url}/v1/conversations/{conversation}/items?order=asc", headers=headers,
                      timeout=30).json()["data"]
    assert [item["type"] for item in items] == ["message", "reasoning", "message", "function_call", "message",
                                                "function_call_output", "reasoning", "message"]
    prompt = backend.bodies()[-1]["prompt"]  # the conversation's items, then the step's input
    assert prompt.index("Checking.") < prompt.index('"city": "Oslo"') < prompt.index('"forecast":"sunny"')
