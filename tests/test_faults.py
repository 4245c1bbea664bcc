"""Production hardening: backend faults, client disconnects, load, limits, auth and observability —
each through a scripted backend that can error, stall, drop and send garbage."""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import socket
import subprocess
import sys
import threading
import time
import tracemalloc

import httpx
import openai
import pytest

from tests.conftest import QWEN3_TEMPLATE, client_for, sse_events
from tests.proxy_server import free_port
from tests.scripted_backend import Gate, Script

MESSAGES = [{"role": "user", "content": "hi"}]
TOOLS = [{"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}]


@pytest.fixture
def setup(backend_factory, proxy_factory):
    def make(kind: str = "vllm", **settings):
        backend = backend_factory(kind, chat_template=QWEN3_TEMPLATE.read_text() if kind == "llamacpp" else None)
        settings.setdefault("chat_template", None if kind == "llamacpp" else str(QWEN3_TEMPLATE))
        settings = {k: v for k, v in settings.items() if v is not None}
        proxy = proxy_factory(backend=backend.url, tool_call_parser="qwen25", **settings)
        return backend, proxy

    return make


def post(proxy, body: dict, **kwargs) -> httpx.Response:
    return httpx.post(proxy.url + "/v1/chat/completions", json={"messages": MESSAGES, **body}, timeout=30, **kwargs)


# ------------------------------------------------------------------------------ backend faults


def test_unreachable_backend_is_503(proxy_factory) -> None:
    port = free_port()  # nothing listens there
    proxy = proxy_factory(backend=f"http://127.0.0.1:{port}", backend_type="vllm", chat_template=str(QWEN3_TEMPLATE),
                          model="m")
    response = post(proxy, {})
    assert response.status_code == 503
    assert response.json()["error"]["type"] == "server_error"
    assert httpx.get(proxy.url + "/health").status_code == 503


def test_connect_timeout_is_504(proxy_factory) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fillers = []
    try:
        filler = socket.socket()
        filler.connect(("127.0.0.1", port))  # the one queued connection; the backlog is now full
        fillers.append(filler)
        proxy = proxy_factory(backend=f"http://127.0.0.1:{port}", backend_type="vllm", model="m",
                              chat_template=str(QWEN3_TEMPLATE), connect_timeout=0.3)
        started = time.monotonic()
        response = post(proxy, {})
        assert response.status_code == 504, response.text
        assert time.monotonic() - started < 5
        assert "timeout" in response.json()["error"]["message"]
    finally:
        for s in fillers:
            s.close()
        listener.close()


def test_backend_4xx_passes_through_as_400_with_its_message(setup) -> None:
    backend, proxy = setup()
    backend.script(Script(status=400, error_message="This model's maximum context length is 4096 tokens"))
    response = post(proxy, {})
    assert response.status_code == 400
    assert "maximum context length" in response.json()["error"]["message"]


def test_backend_5xx_is_502(setup) -> None:
    backend, proxy = setup()
    backend.script(Script(status=500, error_message="CUDA error"))
    response = post(proxy, {"stream": True})
    assert response.status_code == 502 and "CUDA error" in response.json()["error"]["message"]


def test_busy_backend_is_retried_before_the_first_byte(setup) -> None:
    backend, proxy = setup(retries=2)
    backend.script(Script(status=503), Script(status=429), Script(pieces=["ok"]))
    response = post(proxy, {})
    assert response.status_code == 200 and response.json()["choices"][0]["message"]["content"] == "ok"
    assert len(backend.bodies()) == 3


def test_retries_are_bounded(setup) -> None:
    backend, proxy = setup(retries=1)
    backend.script(Script(status=503), Script(status=503), Script(pieces=["never"]))
    assert post(proxy, {}).status_code == 503
    assert len(backend.bodies()) == 2


def test_a_non_retryable_error_is_not_retried(setup) -> None:
    backend, proxy = setup(retries=3)
    backend.script(Script(status=400), Script(pieces=["never"]))
    assert post(proxy, {}).status_code == 400
    assert len(backend.bodies()) == 1


@pytest.mark.parametrize("fault", ["drop", "garbage", "bad_line", "error_event", "no_finish"])
def test_mid_stream_faults_end_with_an_error_event(setup, fault: str) -> None:
    backend, proxy = setup()
    pieces = ["Checking.\n", "<tool_call>", '\n{"name": "get_time", "argum']
    backend.script(Script(pieces=pieces, fault=fault, fault_after=3))
    response = post(proxy, {"stream": True, "tools": TOOLS})
    assert response.status_code == 200
    events = sse_events(response)
    assert "error" in events[-1] and events[-1]["error"]["message"], events[-1]
    assert "[DONE]" not in events
    finishes = [e["choices"][0]["finish_reason"] for e in events if isinstance(e, dict) and e.get("choices")]
    assert not any(finishes), "an unfinished stream must not claim to be finished"


@pytest.mark.parametrize("fault", ["drop", "garbage", "error_event", "no_finish"])
def test_mid_stream_faults_without_streaming_are_502(setup, fault: str) -> None:
    backend, proxy = setup()
    backend.script(Script(pieces=["a", "b"], fault=fault, fault_after=1))
    response = post(proxy, {"tools": TOOLS})
    assert response.status_code == 502
    assert response.json()["error"]["type"] == "server_error"


def test_stalled_backend_hits_the_read_timeout(setup) -> None:
    """The backend goes silent after one piece, for good: only the read timeout can end the request."""
    backend, proxy = setup(read_timeout=0.5)
    backend.script(Script(pieces=["a", "b"], hold=Gate(), hold_after=1), Script(pieces=["a", "b"], hold=Gate()))
    events = sse_events(post(proxy, {"stream": True}))
    assert "read timeout" in events[-1]["error"]["message"]
    response = post(proxy, {})
    assert response.status_code == 504


def test_the_sdk_raises_on_a_mid_stream_error(setup) -> None:
    backend, proxy = setup()
    backend.script(Script(pieces=["a", "b", "c"], fault="drop", fault_after=2))
    with pytest.raises(openai.APIError):
        for _ in client_for(proxy).chat.completions.create(model="x", messages=MESSAGES, stream=True):
            pass


# ---------------------------------------------------------------------------- client disconnect


def test_client_disconnect_closes_the_upstream_request_at_once(setup) -> None:
    """The backend holds the rest of its answer for good after four pieces: only the proxy closing the
    upstream request can end it (its read timeout is 300 s), and it does once the client leaves."""
    backend, proxy = setup()
    backend.script(Script(pieces=[f"tok{i} " for i in range(400)], hold=Gate(), hold_after=4))
    with httpx.Client(timeout=30) as client, client.stream("POST", proxy.url + "/v1/chat/completions",
                       json={"messages": MESSAGES, "stream": True}) as response:
        lines = response.iter_lines()
        for line in lines:
            if "tok3" in line:
                break
    deadline = time.monotonic() + 10
    while backend.seen[-1].closed is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert backend.seen[-1].closed is not None, "the backend never saw the connection close"
    deadline = time.monotonic() + 10  # the stream's own end (its gauge) follows the close
    while proxy.runtime.services.metrics.active_streams._value.get() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert proxy.runtime.services.metrics.active_streams._value.get() == 0


def test_client_disconnect_during_a_non_streaming_request_closes_upstream(setup) -> None:
    """The client hangs up once generation is under way (not on a timer: on a loaded machine the
    request may take a while to reach the backend): the upstream request is closed at once."""
    backend, proxy = setup()
    under_way = Gate()  # generation is under way, and stays so until the proxy closes the request
    backend.script(Script(pieces=[f"tok{i} " for i in range(400)], hold=under_way, hold_after=4))
    host, port = proxy.url.removeprefix("http://").split(":")
    body = json.dumps({"messages": MESSAGES}).encode()
    with socket.create_connection((host, int(port)), timeout=10) as client:
        client.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                       b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        assert under_way.reached.wait(30), "the request never reached the backend"
    deadline = time.monotonic() + 10
    while backend.seen[-1].closed is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert backend.seen[-1].closed is not None, "the upstream request stayed open after the client left"


# ------------------------------------------------------------------------------------ load


def _echo(body: dict) -> Script:
    """Each request gets a completion derived from its own prompt (to detect cross-talk)."""
    marker = body["prompt"].rsplit("request-", 1)[1].split("<", 1)[0].strip()
    return Script(pieces=[f"answer-{marker}-{i} " for i in range(20)])


async def _many_streams(url: str, count: int) -> list[tuple[int, str]]:
    limits = httpx.Limits(max_connections=count + 10)
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:
        async def one(i: int) -> tuple[int, str]:
            body = {"messages": [{"role": "user", "content": f"request-{i}"}], "stream": True}
            text = []
            async with client.stream("POST", url + "/v1/chat/completions", json=body) as response:
                assert response.status_code == 200
                async for line in response.aiter_lines():
                    if line.startswith("data: {"):
                        chunk = json.loads(line[6:])
                        if chunk["choices"]:
                            text.append(chunk["choices"][0]["delta"].get("content") or "")
            return i, "".join(text)

        return await asyncio.gather(*(one(i) for i in range(count)))


def test_concurrent_streams_no_errors_no_cross_talk_memory_returns(setup) -> None:
    backend, proxy = setup()
    backend.responder = _echo
    asyncio.run(_many_streams(proxy.url, 10))  # warm up
    gc.collect()
    tracemalloc.start()
    baseline = tracemalloc.get_traced_memory()[0]
    results = asyncio.run(_many_streams(proxy.url, 120))
    for i, text in results:
        assert text == "".join(f"answer-{i}-{k} " for k in range(20)), f"stream {i} got {text[:80]!r}"
    services = proxy.runtime.services
    deadline = time.monotonic() + 10  # each stream lets go of its slot as its last bytes leave, and of its
    # backend connection once the backend's last bytes are read (in the background: ``draining``)
    while ((services.slots.used or services.metrics.active_streams._value.get() or services.streaming.draining)
           and time.monotonic() < deadline):
        time.sleep(0.01)
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    assert after - baseline < 3_000_000, f"memory grew by {after - baseline} bytes"
    assert proxy.runtime.services.slots.used == 0 and proxy.runtime.services.metrics.active_streams._value.get() == 0


def test_max_concurrency_answers_429_with_retry_after(setup) -> None:
    backend, proxy = setup(max_concurrency=2)
    held = Gate()  # both slots stay taken until the third request has been refused
    backend.responder = lambda body: Script(pieces=["x"] * 50, hold=held, hold_after=1)
    responses: list[httpx.Response] = []

    def slow() -> None:
        responses.append(post(proxy, {"stream": True}))

    threads = [threading.Thread(target=slow) for _ in range(2)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 5
    while proxy.runtime.services.slots.used < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    refused = post(proxy, {})
    held.open()
    assert refused.status_code == 429
    assert refused.headers["retry-after"] == "1"
    assert refused.json()["error"]["code"] == "rate_limit_exceeded"
    for t in threads:
        t.join()
    assert all(r.status_code == 200 for r in responses)
    assert proxy.runtime.services.slots.used == 0
    assert post(proxy, {}).status_code == 200


def test_multiple_workers_serve(tmp_path) -> None:
    from tests.scripted_backend import ScriptedBackend

    backend = ScriptedBackend("vllm").start()
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "app.cli", "serve", "--backend", backend.url, "--port", str(port),
                             "--workers", "2", "--chat-template", str(QWEN3_TEMPLATE)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        for _ in range(6):
            r = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", json={"messages": MESSAGES}, timeout=30)
            assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == "Hello!"
        children = subprocess.run(["ps", "-o", "pid=", "--ppid", str(proc.pid)], capture_output=True,
                                  text=True, check=False).stdout.split()
        assert len(children) >= 2, "expected two worker processes"
    finally:
        proc.terminate()
        proc.wait(20)
        backend.stop()


# --------------------------------------------------------------------------- limits and auth


@pytest.mark.parametrize(("settings", "body", "status", "needle"), [
    ({"max_body_bytes": 2048}, {"messages": [{"role": "user", "content": "x" * 5000}]}, 413, "larger than"),
    ({"max_messages": 2}, {"messages": MESSAGES * 3}, 400, "too many messages"),
    ({"max_tools": 1}, {"messages": MESSAGES, "tools": TOOLS * 2}, 400, "too many tools"),
    ({"max_tool_schema_bytes": 256}, {"messages": MESSAGES, "tools": [{"type": "function", "function": {
        "name": "f", "parameters": {"type": "object", "description": "d" * 400}}}]}, 400, "larger than"),
    ({"max_tokens_cap": 100, "max_tokens_policy": "reject"}, {"messages": MESSAGES, "max_tokens": 1000}, 400, "cap"),
])
def test_input_limits(setup, settings: dict, body: dict, status: int, needle: str) -> None:
    _, proxy = setup(**settings)
    response = httpx.post(proxy.url + "/v1/chat/completions", json=body, timeout=30)
    assert response.status_code == status
    assert needle in response.json()["error"]["message"]


def test_keys_file_and_metrics_behind_the_key(setup, tmp_path) -> None:
    keys = tmp_path / "keys"
    keys.write_text("# team keys\nsecret-a\n\nsecret-b\n")
    _, proxy = setup(api_keys_file=str(keys))
    assert httpx.get(proxy.url + "/metrics").status_code == 401
    assert httpx.get(proxy.url + "/metrics", headers={"Authorization": "Bearer secret-b"}).status_code == 200
    assert httpx.get(proxy.url + "/health").status_code == 200
    assert post(proxy, {}, headers={"Authorization": "Bearer secret-a"}).status_code == 200
    assert post(proxy, {}, headers={"Authorization": "Bearer nope"}).status_code == 401
    _, open_proxy = setup(api_key=["k"], metrics_open=True)
    assert httpx.get(open_proxy.url + "/metrics").status_code == 200


def test_backend_credentials_go_upstream_and_never_into_logs(setup, caplog: pytest.LogCaptureFixture) -> None:
    backend, proxy = setup(backend_api_key="sk-backend-secret", log_level="debug")
    caplog.set_level(logging.DEBUG)
    backend.script(Script(status=500, error_message="boom"))
    response = post(proxy, {})
    assert "sk-backend-secret" not in response.text
    assert "sk-backend-secret" not in caplog.text
    assert "sk-backend-secret" not in httpx.get(proxy.url + "/health").text


def test_cors_is_off_by_default_and_settable(setup) -> None:
    _, proxy = setup()
    preflight = {"Origin": "https://app.example", "Access-Control-Request-Method": "POST"}
    off = httpx.options(proxy.url + "/v1/chat/completions", headers=preflight)
    assert "access-control-allow-origin" not in off.headers
    _, cors = setup(cors_origins=["https://app.example"])
    on = httpx.options(cors.url + "/v1/chat/completions", headers=preflight)
    assert on.headers["access-control-allow-origin"] == "https://app.example"


# ------------------------------------------------------------------------------ observability


def test_request_ids_are_honoured_and_returned(setup) -> None:
    _, proxy = setup()
    assert post(proxy, {}, headers={"X-Request-ID": "abc-123"}).headers["x-request-id"] == "abc-123"
    generated = post(proxy, {}).headers["x-request-id"]
    assert len(generated) == 32
    assert post(proxy, {}, headers={"X-Request-ID": "bad id; drop"}).headers["x-request-id"] != "bad id; drop"


def test_metrics(setup) -> None:
    backend, proxy = setup()
    call = '<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>'
    unknown = '<tool_call>\n{"name": "not_offered", "arguments": {}}\n</tool_call>'
    backend.script(Script(pieces=[call, unknown], prompt_tokens=11), Script(pieces=["<tool_call>oops</tool_call>"]),
                   Script(status=500))
    assert post(proxy, {"tools": TOOLS, "stream": True}).status_code == 200
    assert post(proxy, {"tools": TOOLS}).status_code == 200
    assert post(proxy, {}).status_code == 502
    text = httpx.get(proxy.url + "/metrics").text
    for needle in ('toolwire_requests_total{endpoint="/v1/chat/completions",status="200"} 2.0',
                   'toolwire_requests_total{endpoint="/v1/chat/completions",status="502"} 1.0',
                   'toolwire_parse_events_total{detector="qwen25",event="tool_call"} 2.0',
                   'toolwire_parse_events_total{detector="qwen25",event="unknown_tool"} 1.0',
                   'toolwire_parse_events_total{detector="qwen25",event="malformed_passthrough"} 1.0',
                   'toolwire_backend_errors_total{kind="http_5xx"} 1.0',
                   'toolwire_tokens_total{direction="prompt"} 18.0',
                   "toolwire_time_to_first_token_seconds_count 2.0",
                   "toolwire_active_streams 0.0"):
        assert needle in text, needle


def test_logs_are_json_with_request_ids_and_no_content(tmp_path) -> None:
    from tests.scripted_backend import ScriptedBackend

    backend = ScriptedBackend("vllm").start()
    backend.default = Script(pieces=["SECRET-COMPLETION"])
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "app.cli", "serve", "--backend", backend.url, "--port", str(port),
                             "--chat-template", str(QWEN3_TEMPLATE)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                httpx.get(f"http://127.0.0.1:{port}/health", timeout=1)
                break
            except httpx.HTTPError:
                time.sleep(0.1)
        r = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", headers={"X-Request-ID": "req-42"},
                       json={"messages": [{"role": "user", "content": "SECRET-PROMPT"}]}, timeout=30)
        assert r.status_code == 200
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=20)
        backend.stop()
    lines = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    assert lines and all("level" in entry and "msg" in entry for entry in lines)
    assert any(entry.get("request_id") == "req-42" and entry.get("path") == "/v1/chat/completions" for entry in lines)
    assert "SECRET-PROMPT" not in err and "SECRET-COMPLETION" not in err


def test_graceful_shutdown_drains_in_flight_streams(setup) -> None:
    backend, proxy = setup(shutdown_grace=30)
    held = Gate()  # the stream is in flight, and stays so until the shutdown has begun
    backend.script(Script(pieces=[f"t{i} " for i in range(30)], hold=held, hold_after=3))
    result: list[httpx.Response] = []
    thread = threading.Thread(target=lambda: result.append(post(proxy, {"stream": True})))
    thread.start()
    assert held.reached.wait(30)
    proxy.server.should_exit = True  # what SIGTERM does
    host, port = proxy.url.removeprefix("http://").split(":")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # the shutdown has begun: no new connection is accepted
        try:
            socket.create_connection((host, int(port)), timeout=1).close()
        except OSError:
            break
        time.sleep(0.01)
    held.open()
    thread.join(30)
    assert result and result[0].status_code == 200
    events = sse_events(result[0])
    assert events[-1] == "[DONE]", "the in-flight stream was cut instead of drained"
