"""A response store that fails never costs the client a finished answer, and reads that need it say
so: Redis stopped and restarted, and SQLite on a full disk (a real ``toolwire serve`` process under
``ulimit -f``). Over HTTP with the official ``openai`` SDK."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.conftest import QWEN3_TEMPLATE, client_for
from tests.proxy_server import ProxyServer, free_port
from tests.redis_server import RedisServer
from tests.scale_cluster import wait_for
from tests.scripted_backend import Gate, Script, ScriptedBackend

TOOLS: list[dict[str, Any]] = [{"type": "function", "name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]


def _events(response: httpx.Response) -> list[dict[str, Any]]:
    return [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: ")]


@pytest.fixture
def on_redis(backend_factory: Callable[..., ScriptedBackend],
             proxy_factory: Callable[..., ProxyServer]) -> Iterator[tuple[ScriptedBackend, ProxyServer, RedisServer]]:
    redis = RedisServer()
    backend = backend_factory("vllm", model="Qwen/Qwen3-8B")
    proxy = proxy_factory(backend=backend.url, chat_template=str(QWEN3_TEMPLATE), tool_call_parser="qwen25",
                          response_store=redis.url, thinking_secret="s")
    yield backend, proxy, redis
    redis.stop()


def _store_reported(proxy: ProxyServer, state: str) -> None:
    """Wait until ``/health`` reports the store ``state``: the background check has seen it (it
    checks every ``--store-check-interval``; the probes report its last result, never wait on it)."""
    wait_for(lambda: httpx.get(proxy.url + "/health", timeout=5).json()["store"] == state, 20,
             f"the store was not reported {state}")


def _assert_store_unavailable(response: httpx.Response) -> None:
    assert response.status_code == 503, response.text
    assert response.json()["error"]["code"] == "store_unavailable"
    assert response.headers.get("retry-after")


def test_redis_down_keeps_answers_and_says_what_needs_the_store(on_redis) -> None:
    backend, proxy, redis = on_redis
    client = client_for(proxy)
    backend.script(Script(pieces=["Stored."]))
    kept = client.responses.create(model="m", input="first")
    port = redis.port
    redis.stop()
    # a finished answer is never lost: returned with a visible warning, marked not stored
    backend.script(Script(pieces=["Still answered."]))
    raw = httpx.post(proxy.url + "/v1/responses", json={"model": "m", "input": "x"}, timeout=30)
    assert raw.status_code == 200, raw.text
    assert raw.json()["output"][0]["content"][0]["text"] == "Still answered."
    assert raw.json()["store"] is False and "not stored" in raw.headers["x-toolwire-warning"]
    # streaming: every delta, then error + response.failed (the output included)
    backend.script(Script(pieces=["Streamed ", "answer."]))
    events = _events(httpx.post(proxy.url + "/v1/responses", json={"model": "m", "input": "x", "stream": True},
                                timeout=30))
    text = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert text == "Streamed answer."
    assert [e["type"] for e in events[-2:]] == ["error", "response.failed"]
    assert events[-2]["code"] == "store_unavailable"
    assert events[-1]["response"]["output"][0]["content"][0]["text"] == "Streamed answer."
    # reads that need the store: 503 store_unavailable, never 500
    _assert_store_unavailable(httpx.get(proxy.url + f"/v1/responses/{kept.id}", timeout=30))
    _assert_store_unavailable(httpx.delete(proxy.url + f"/v1/responses/{kept.id}", timeout=30))
    _assert_store_unavailable(httpx.get(proxy.url + f"/v1/responses/{kept.id}/input_items", timeout=30))
    _assert_store_unavailable(httpx.post(proxy.url + "/v1/responses", timeout=30, json={
        "model": "m", "input": "more", "previous_response_id": kept.id}))
    # what does not need the store keeps working; health and readiness report the store
    backend.script(Script(pieces=["Chat works."]), Script(pieces=["Unstored works."]))
    chat = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    assert chat.choices[0].message.content == "Chat works."
    assert client.responses.create(model="m", input="x", store=False).output_text == "Unstored works."
    _store_reported(proxy, "unavailable")
    assert httpx.get(proxy.url + "/health", timeout=30).status_code == 200
    ready = httpx.get(proxy.url + "/readyz", timeout=30)
    assert ready.status_code == 200 and ready.json() == {"status": "ready", "backend": "ok", "store": "unavailable"}
    # Redis back (empty, at the same address): service recovers by itself, stale connections retried
    # (a Redis that refused at once never opened the store's breaker: the first request finds it back)
    restarted = RedisServer(port=port)
    try:
        backend.script(Script(pieces=["Back."]))
        again = client.responses.create(model="m", input="again")
        assert client.responses.retrieve(again.id).output_text == "Back."
        _store_reported(proxy, "ok")
    finally:
        restarted.stop()


def test_a_hung_redis_never_holds_the_probes_and_store_calls_fail_fast(
        backend_factory: Callable[..., ScriptedBackend], proxy_factory: Callable[..., ProxyServer]) -> None:
    """Redis stopped rather than gone (SIGSTOP: a stuck Redis or a partition looks the same).
    ``/readyz`` and ``/health`` answer within the shipped probes' timeout (Kubernetes': 1 s) with the
    last background check's finding; once the store's breaker has opened, a request that needs the
    store is a 503 at once (well within 1 s, against a ``--store-timeout`` of 10 s here); what does
    not need the store goes on; and after SIGCONT the store is back by itself."""
    redis = RedisServer()
    backend = backend_factory("vllm", model="Qwen/Qwen3-8B")
    proxy = proxy_factory(backend=backend.url, chat_template=str(QWEN3_TEMPLATE), response_store=redis.url,
                          store_timeout=10)
    client = client_for(proxy)
    backend.script(Script(pieces=["Stored."]))
    kept = client.responses.create(model="m", input="first")
    stored_url = f"{proxy.url}/v1/responses/{kept.id}"
    os.kill(redis.process.pid, signal.SIGSTOP)
    try:
        for _ in range(3):  # never waiting on the store: each within a Kubernetes readiness probe's timeout
            ready = httpx.get(proxy.url + "/readyz", timeout=1)
            assert ready.status_code == 200 and ready.json()["status"] == "ready"
            assert httpx.get(proxy.url + "/health", timeout=1).status_code == 200
        _store_reported(proxy, "unavailable")
        # a request that meets the hung store waits (up to --store-timeout); failed checks and calls
        # open the breaker, and from then on every one is refused at once
        wait_for(lambda: httpx.get(stored_url, timeout=1).status_code == 503, 30, "the store's breaker did not open")
        for _ in range(5):
            _assert_store_unavailable(httpx.get(stored_url, timeout=1))
            _assert_store_unavailable(httpx.post(proxy.url + "/v1/responses", timeout=1, json={
                "model": "m", "input": "more", "previous_response_id": kept.id}))
        backend.script(Script(pieces=["Answered."]), Script(pieces=["Chat works."]))
        answered = httpx.post(proxy.url + "/v1/responses", json={"model": "m", "input": "x"}, timeout=1)
        assert answered.status_code == 200 and "not stored" in answered.headers["x-toolwire-warning"]
        assert answered.json()["output"][0]["content"][0]["text"] == "Answered."
        chat = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        assert chat.choices[0].message.content == "Chat works."
    finally:
        os.kill(redis.process.pid, signal.SIGCONT)
    try:
        _store_reported(proxy, "ok")
        assert client.responses.retrieve(kept.id).output_text == "Stored."
    finally:
        redis.stop()


def _serve(args: list[str], cwd: Path, limit_kb: int | None = None) -> subprocess.Popen[bytes]:
    toolwire = Path(sys.executable).parent / "toolwire"
    command = " ".join([str(toolwire), "serve", *args])
    if limit_kb is not None:
        command = f"ulimit -f {limit_kb}; exec {command}"
    return subprocess.Popen(["bash", "-c", command], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def _wait_up(url: str, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert process.poll() is None, process.stdout.read().decode() if process.stdout else ""
        try:
            if httpx.get(url + "/livez", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise AssertionError("toolwire did not start")


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash for ulimit")
def test_sqlite_on_a_full_disk_keeps_answers(backend_factory, tmp_path: Path) -> None:
    backend = backend_factory("vllm", model="Qwen/Qwen3-8B")
    port = free_port()
    state = tmp_path / "state"
    process = _serve(["--backend", backend.url, "--port", str(port), "--state-dir", str(state),
                      "--chat-template", str(QWEN3_TEMPLATE)], tmp_path, limit_kb=256)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_up(url, process)
        client = openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0)
        backend.script(Script(pieces=["Small."]))
        small = client.responses.create(model="m", input="small")
        assert client.responses.retrieve(small.id).output_text == "Small."
        big = "word " * 120_000  # 600 KB of input: the store's file cannot grow that much
        backend.script(Script(pieces=["Answered anyway."]))
        raw = httpx.post(url + "/v1/responses", json={"model": "m", "input": big}, timeout=60)
        assert raw.status_code == 200, raw.text
        assert raw.json()["output"][0]["content"][0]["text"] == "Answered anyway."
        assert "not stored" in raw.headers["x-toolwire-warning"]
        backend.script(Script(pieces=["Streamed anyway."]))
        events = _events(httpx.post(url + "/v1/responses", json={"model": "m", "input": big, "stream": True},
                                    timeout=60))
        assert [e["type"] for e in events[-2:]] == ["error", "response.failed"]
        assert client.responses.retrieve(small.id).output_text == "Small."  # what was stored stays readable
    finally:
        process.terminate()
        process.wait(20)


def test_a_bad_state_dir_is_one_line_and_a_nonzero_exit(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("x")
    (tmp_path / "corrupt").mkdir()
    (tmp_path / "corrupt" / "responses.sqlite3").write_bytes(b"not a database at all" * 64)
    for state_dir in (tmp_path / "a-file" / "below", tmp_path / "corrupt"):
        done = subprocess.run([sys.executable, "-m", "app.cli", "serve", "--backend", "http://127.0.0.1:9",
                               "--state-dir", str(state_dir)], capture_output=True, text=True, timeout=60,
                              env={**os.environ, "TOOLWIRE_DRAIN_SECONDS": "0"}, check=False)
        assert done.returncode != 0
        assert "Traceback" not in done.stderr + done.stdout
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and "response store" in lines[0] and str(state_dir) in lines[0], done.stderr


def test_redis_down_conversations_say_what_needs_the_store(on_redis) -> None:
    """Every conversation read and write, a response in a conversation and a response that refers to
    stored items need the store: 503 ``store_unavailable``. A conversation response whose store fails
    while it streams still delivers the whole answer, then ``error`` and ``response.failed``."""
    backend, proxy, redis = on_redis
    client = client_for(proxy)
    conv = client.conversations.create(items=[{"role": "user", "content": "kept"}])
    item = client.conversations.items.list(conv.id).data[0]
    backend.script(Script(pieces=["Stored."]))
    kept = client.responses.create(model="m", input="first")
    # the store fails while a conversation response streams (held after its first piece until Redis
    # has stopped): the answer is still whole
    held = Gate()
    backend.script(Script(pieces=["Slow ", "answer ", "here."], hold=held, hold_after=1))
    with httpx.stream("POST", proxy.url + "/v1/responses", timeout=30,
                      json={"model": "m", "input": "x", "conversation": conv.id, "stream": True}) as streamed:
        lines = streamed.iter_lines()
        first = next(line for line in lines if line.startswith("data: ") and "output_text.delta" in line)
        port = redis.port
        redis.stop()
        held.open()
        events = [json.loads(first[6:])] + [json.loads(line[6:]) for line in lines if line.startswith("data: ")]
    assert "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta") == "Slow answer here."
    assert [e["type"] for e in events[-2:]] == ["error", "response.failed"] and events[-2]["code"] == "store_unavailable"
    url = proxy.url + "/v1/conversations"
    for method, path, body in [("POST", "", {}), ("GET", f"/{conv.id}", None), ("POST", f"/{conv.id}", {"metadata": {}}),
                               ("DELETE", f"/{conv.id}", None), ("GET", f"/{conv.id}/items", None),
                               ("POST", f"/{conv.id}/items", {"items": [{"role": "user", "content": "y"}]}),
                               ("GET", f"/{conv.id}/items/{item.id}", None),
                               ("DELETE", f"/{conv.id}/items/{item.id}", None)]:
        _assert_store_unavailable(httpx.request(method, url + path, json=body, timeout=30))
    calls = len(backend.bodies())
    _assert_store_unavailable(httpx.post(proxy.url + "/v1/responses", timeout=30, json={
        "model": "m", "input": "more", "conversation": conv.id}))
    _assert_store_unavailable(httpx.post(proxy.url + "/v1/responses", timeout=30, json={
        "model": "m", "input": [{"type": "item_reference", "id": kept.output[0].id}]}))
    assert len(backend.bodies()) == calls  # nothing was generated for requests that cannot be read
    restarted = RedisServer(port=port)  # back, empty: the conversation went with the old Redis
    try:
        with pytest.raises(openai.NotFoundError):
            client.conversations.retrieve(conv.id)
        assert client.conversations.create().id.startswith("conv_")
    finally:
        restarted.stop()
