"""``tojson``'s memo (kept by the prefix service, ``app.prefix``): what it answers is what
``json.dumps`` answers for the value in hand — a changed value is encoded again, and values equal
in Python but not in JSON (``True`` and ``1``, ``nan`` and ``None``) never share an answer."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from app.prefix import PrefixService
from app.templates import chat_template
from app.templates.chat_template import _json_default
from bench.agent import agent_tools


class Memo:
    """``tojson`` as a render with a memo runs it (values of any size are kept)."""

    def __init__(self, max_bytes: int = 4 << 20) -> None:
        self.service = PrefixService(max_bytes)

    def dumps(self, value: Any, **options: Any) -> str:
        token = chat_template._memo.set(self.service)
        try:
            return chat_template._tojson(value, **options)
        finally:
            chat_template._memo.reset(token)

    def __len__(self) -> int:
        return len(self.service)


@pytest.fixture(autouse=True)
def any_size(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(chat_template, "MEMO_MIN_BYTES", 0)


def direct(value: Any, **options: Any) -> str:
    return json.dumps(value, default=_json_default, **{"ensure_ascii": False, **options})


TOOL = agent_tools(1, 600)[0]


def changed(path: tuple[str, ...], new: Any) -> dict[str, Any]:
    tool = json.loads(json.dumps(TOOL))
    node = tool
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = new
    return tool


@pytest.mark.parametrize("other", [
    changed(("function", "description"), "Another description, «é»."),
    changed(("function", "parameters", "properties", "path", "description"), "x"),
    changed(("function", "parameters", "additionalProperties"), 0),  # False == 0 in Python, not in JSON
    changed(("function", "parameters", "properties", "options", "properties", "timeout_ms", "maximum"), 600000.0),
    changed(("function", "parameters", "properties", "options", "properties", "timeout_ms", "maximum"), math.nan),
    changed(("function", "parameters", "required"), ("path",)),  # a tuple: the same JSON, its own key
])
def test_a_changed_value_gets_its_own_answer(other: dict[str, Any]) -> None:
    memo = Memo()
    assert memo.dumps(TOOL) == direct(TOOL)
    assert memo.dumps(TOOL) == direct(TOOL) and len(memo) == 1  # the second time: from the memo
    assert memo.dumps(other) == direct(other)
    assert memo.dumps(other) == direct(other) != direct(TOOL) or isinstance(
        other["function"]["parameters"]["required"], tuple)
    assert memo.dumps(TOOL) == direct(TOOL)


def test_options_are_part_of_the_key() -> None:
    memo = Memo()
    for options in ({}, {"indent": 2}, {"sort_keys": True}, {"separators": (",", ":")}, {"ensure_ascii": True}):
        assert memo.dumps(TOOL, **options) == direct(TOOL, **options)
    assert len(memo) == 5


def test_what_marshal_refuses_is_encoded_each_time() -> None:
    memo = Memo()
    assert memo.dumps(iter([1, 2])) == "[1, 2]"
    assert len(memo) == 0


def test_the_memo_stays_within_its_bytes() -> None:
    memo = Memo(max_bytes=20_000)
    for i in range(40):
        value = {"i": i, "text": "x" * 2000}
        assert memo.dumps(value) == direct(value)
        assert memo.service.bytes <= memo.service.max_bytes
    assert 0 < len(memo) < 40


def test_values_one_json_encoder_would_confuse_are_told_apart() -> None:
    """``nan`` and ``None`` are both ``null`` to orjson; ``json.dumps`` (and so the prompt) says ``NaN``."""
    memo = Memo()
    pad = "p" * 300
    assert memo.dumps({"m": None, "pad": pad}) == direct({"m": None, "pad": pad})
    assert memo.dumps({"m": math.nan, "pad": pad}).startswith('{"m": NaN')
    assert memo.dumps({"m": False, "pad": pad}).startswith('{"m": false')
    assert memo.dumps({"m": 0, "pad": pad}).startswith('{"m": 0')


def test_a_short_conversation_s_tools_are_encoded_once_for_the_process(backend_factory, proxy_factory) -> None:
    """A request too short for the prefix service to keep (a chat client's, the first-token
    side-by-side's) still has its tools' ``tojson`` answers kept by it: the next request with the
    same tools takes them, and its prompt is the same. (Tools this process has not checked are
    prepared in a worker, which keeps nothing: the first request checks them, unless a test before
    it in the process did.)"""
    import httpx

    from tests.conftest import QWEN3_TEMPLATE

    backend = backend_factory("vllm", model="Qwen/Qwen3-8B")
    proxy = proxy_factory(backend=backend.url, chat_template=str(QWEN3_TEMPLATE))
    service = proxy.runtime.services.prefix
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "tools": agent_tools()[:2]}
    assert httpx.post(proxy.url + "/v1/chat/completions", json=body, timeout=60).status_code == 200
    assert httpx.post(proxy.url + "/v1/chat/completions", json=body, timeout=60).status_code == 200
    kept = [key for key in service._held if isinstance(key, bytes)]
    assert kept, "the tools' encodings were not kept"
    assert httpx.post(proxy.url + "/v1/chat/completions", json=body, timeout=60).status_code == 200
    first, second, third = (b["prompt"] for b in backend.bodies())
    assert first == second == third
    assert [key for key in service._held if isinstance(key, bytes)] == kept
