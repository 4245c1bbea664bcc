"""The HTTP edge around every face: CORS with API keys, errors in the shape of the face whose path
was asked for (404 and 405 included), the concurrency bound and disconnects on every generating
route, liveness and readiness."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import httpx
import pytest

from tests.conftest import QWEN3_TEMPLATE
from tests.proxy_server import ProxyServer
from tests.scripted_backend import Gate, Script, ScriptedBackend

ORIGIN = "https://app.example"


@pytest.fixture
def make(backend_factory: Callable[..., ScriptedBackend],
         proxy_factory: Callable[..., ProxyServer]) -> tuple[ScriptedBackend, Callable[..., ProxyServer]]:
    backend = backend_factory("vllm", model="Qwen/Qwen3-8B")

    def proxy(**settings: object) -> ProxyServer:
        return proxy_factory(backend=backend.url, chat_template=str(QWEN3_TEMPLATE), **settings)

    return backend, proxy


def test_cors_preflight_passes_and_refusals_carry_cors_headers(make) -> None:
    backend, proxy = make
    server = proxy(api_key=["k"], cors_origins=[ORIGIN])
    preflight = httpx.options(server.url + "/v1/chat/completions", headers={
        "origin": ORIGIN, "access-control-request-method": "POST",
        "access-control-request-headers": "authorization,content-type"})
    assert preflight.status_code == 200
    assert preflight.headers["access-control-allow-origin"] == ORIGIN
    refused = httpx.post(server.url + "/v1/chat/completions", headers={"origin": ORIGIN}, json={})
    assert refused.status_code == 401
    assert refused.headers["access-control-allow-origin"] == ORIGIN  # the browser can read why
    backend.script(Script(pieces=["Hi."]))
    allowed = httpx.post(server.url + "/v1/chat/completions", headers={"origin": ORIGIN, "authorization": "Bearer k"},
                         json={"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    assert allowed.status_code == 200 and allowed.headers["access-control-allow-origin"] == ORIGIN


@pytest.mark.parametrize(("method", "path", "status"), [
    ("GET", "/v1/messages", 405), ("GET", "/v1/messages/count_tokens", 405), ("DELETE", "/v1/messages", 405),
    ("GET", "/v1/messages/batches", 404), ("POST", "/v1/messages/nope", 404),
])
def test_messages_paths_answer_in_anthropic_shape(make, method: str, path: str, status: int) -> None:
    _, proxy = make
    response = httpx.request(method, proxy().url + path, json={} if method == "POST" else None)
    assert response.status_code == status, response.text
    body = response.json()
    assert body["type"] == "error" and body["error"]["type"] in ("invalid_request_error", "not_found_error")
    assert path in body["error"]["message"]


@pytest.mark.parametrize(("method", "path", "status"), [
    ("GET", "/v1/chat/completions", 405), ("GET", "/v1/nothing", 404), ("PUT", "/v1/responses/x", 405),
])
def test_other_paths_answer_in_openai_shape(make, method: str, path: str, status: int) -> None:
    _, proxy = make
    response = httpx.request(method, proxy().url + path)
    assert response.status_code == status, response.text
    assert response.json()["error"]["type"] == "invalid_request_error"


def test_count_tokens_holds_a_concurrency_slot_and_stops_when_the_client_leaves(make) -> None:
    backend, proxy = make
    server = proxy(max_concurrency=1)
    held = Gate()  # the one slot stays taken until count_tokens has been refused
    backend.script(Script(pieces=["slow", " answer"], hold=held, hold_after=1))
    body = {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
    holder = threading.Thread(target=lambda: httpx.post(server.url + "/v1/messages", json=body, timeout=30))
    holder.start()
    assert held.reached.wait(30)
    counted = httpx.post(server.url + "/v1/messages/count_tokens", json={k: body[k] for k in ("model", "messages")})
    held.open()
    assert counted.status_code == 429 and counted.json()["error"]["type"] == "rate_limit_error"
    holder.join(30)
    assert server.runtime.services.slots.used == 0
    assert httpx.post(server.url + "/v1/messages/count_tokens",
                      json={k: body[k] for k in ("model", "messages")}).status_code == 200


def test_liveness_and_readiness(make) -> None:
    _, proxy = make
    server = proxy()
    assert httpx.get(server.url + "/livez").json() == {"status": "ok"}
    ready = httpx.get(server.url + "/readyz")
    assert ready.status_code == 200 and ready.json() == {"status": "ready", "backend": "ok", "store": "ok"}
    server.runtime.draining = True
    draining = httpx.get(server.url + "/readyz")
    assert draining.status_code == 503 and draining.json()["status"] == "draining"
    assert httpx.get(server.url + "/livez").status_code == 200
    from tests.proxy_server import free_port

    nobody = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    unready = ProxyServer(backend=nobody, chat_template=str(QWEN3_TEMPLATE), connect_timeout=0.5).start()
    try:
        answer = httpx.get(unready.url + "/readyz")
        assert answer.status_code == 503 and answer.json()["status"] == "unavailable"
        assert httpx.get(unready.url + "/livez").status_code == 200  # alive: never depends on the backend
    finally:
        unready.stop()


@pytest.mark.parametrize("workers", [1, 2])
def test_sigterm_drains_before_shutting_down(backend_factory, workers: int) -> None:
    """After SIGTERM a replica says ``draining`` on /readyz and still serves for ``--drain-seconds``,
    then stops (one process, and uvicorn's worker processes alike)."""
    import signal
    import subprocess
    import sys

    from tests.proxy_server import free_port

    backend = backend_factory("vllm", model="Qwen/Qwen3-8B")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    process = subprocess.Popen([sys.executable, "-m", "app.cli", "serve", "--backend", backend.url, "--port",
                                str(port), "--chat-template", str(QWEN3_TEMPLATE), "--drain-seconds", "3",
                                "--workers", str(workers)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(url + "/readyz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline and process.poll() is None
            time.sleep(0.1)
        process.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        seen: set[str] = set()
        while time.monotonic() - sent < 2.0:  # within the drain: draining, and still serving
            ready = httpx.get(url + "/readyz", timeout=2)
            seen.add(ready.json()["status"])
            backend.script(Script(pieces=["Still here."]))
            served = httpx.post(url + "/v1/chat/completions", timeout=10,
                                json={"model": "m", "messages": [{"role": "user", "content": "hi"}]})
            assert served.status_code == 200
            time.sleep(0.2)
        assert "draining" in seen and ready.status_code == 503
        process.wait(20)
        assert time.monotonic() - sent >= 2.5  # it did not stop before the drain was over
    finally:
        if process.poll() is None:
            process.kill()
