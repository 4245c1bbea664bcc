"""Issue #14, round 2 of hardening: no request stalls the server, nothing a client sends gives a
500, no limit can be bypassed. One test (or a few) per defect; each failed on the code before the fix.

Timing: assertions are on outcomes with generous bounds (a probe answered while a heavy request
was still being prepared; an upstream request closed long before its read timeout), never tight
durations, so a loaded machine does not make them flaky.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import logging
import os
import signal
import socket
import threading
import time
import tracemalloc
from typing import Any

import httpx
import pytest

from tests.conftest import QWEN3_TEMPLATE, client_for, sse_events
from tests.proxy_server import ProxyServer
from tests.scripted_backend import Gate, Script, ScriptedBackend

MESSAGES = [{"role": "user", "content": "hi"}]
TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}}


def post(proxy: ProxyServer, body: dict[str, Any], path: str = "/v1/chat/completions", **kwargs: Any) -> httpx.Response:
    return httpx.post(proxy.url + path, json=body, timeout=60, **kwargs)


@pytest.fixture
def vllm(backend_factory, proxy_factory) -> tuple[ScriptedBackend, Any]:
    backend = backend_factory("vllm", model="Qwen/Qwen3-8B")

    def make(**settings: Any) -> ProxyServer:
        return proxy_factory(backend=backend.url, chat_template=str(QWEN3_TEMPLATE), tool_call_parser="qwen25",
                             **settings)

    return backend, make


# -------------------------------------------------------------- 1. heavy work off the loop, bounded

SLOW_TEMPLATE = ("{% for m in messages %}{% for i in range(100000) %}{% endfor %}{% for i in range(100000) %}"
                 "{% endfor %}{% for i in range(100000) %}{% endfor %}{% endfor %}{{ messages[-1].content }}")


def in_flight(proxy: ProxyServer) -> int:
    """Jobs the proxy's prepare workers hold now (asked on its loop)."""
    async def count() -> int:
        return len(proxy.runtime.services.pool._jobs)

    return proxy.call(count()).result(10)


def until(condition: Any, what: str, seconds: float = 60) -> None:
    """Wait until ``condition()`` holds — a state the test waits for, not a time it guesses."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.01)


def test_a_slow_render_is_a_400_and_the_loop_keeps_serving(backend_factory, proxy_factory, tmp_path) -> None:
    backend = backend_factory("vllm")
    template = tmp_path / "slow.jinja"
    template.write_text(SLOW_TEMPLATE)
    proxy = proxy_factory(backend=backend.url, chat_template=str(template), max_render_ms=300)
    heavy: dict[str, Any] = {}

    def send_heavy() -> None:  # 120 messages: heavy, so it is prepared off the loop (~2–4 s of rendering)
        heavy["response"] = post(proxy, {"model": "m", "messages": MESSAGES * 120})

    sender = threading.Thread(target=send_heavy)
    sender.start()
    until(lambda: in_flight(proxy) > 0, "the heavy request reached a worker")
    probe = httpx.get(proxy.url + "/v1/models", timeout=60)
    served_meanwhile = in_flight(proxy) > 0 or "response" not in heavy
    sender.join(60)
    assert probe.status_code == 200
    assert served_meanwhile, "the probe was answered only once the render was over"
    response = heavy["response"]
    assert response.status_code == 400, response.text
    assert "--max-render-ms" in response.json()["error"]["message"]
    # a light request is still served inline, and correctly
    assert post(proxy, {"model": "m", "messages": MESSAGES}).status_code == 200


#: slow to render when the first message says so (seconds), a little work per message otherwise
SLOW_IF_ASKED = ("{% if messages[0].content == 'slow' %}{% for i in range(300) %}{% for j in range(100000) %}"
                 "{% endfor %}{% endfor %}{% endif %}"
                 "{% if messages[0].content == 'medium' %}{% for i in range(20) %}{% for j in range(100000) %}"
                 "{% endfor %}{% endfor %}{% endif %}"
                 "{% for m in messages %}{% for i in range(2000) %}{% endfor %}{% endfor %}"
                 "{{ messages[-1].content }}")


def heavy(first: str = "fast", turns: int = 70, tag: str = "hi") -> dict[str, Any]:
    """More than 64 messages: prepared by a worker process (``tag`` tells one conversation from another)."""
    return {"model": "m", "messages": [{"role": "user", "content": first}, {"role": "user", "content": tag}]
            + MESSAGES * (turns - 2)}


@pytest.fixture
def slow_if_asked(backend_factory, proxy_factory, tmp_path) -> Any:
    backend = backend_factory("vllm")
    template = tmp_path / "slow-if-asked.jinja"
    template.write_text(SLOW_IF_ASKED)

    def make(**settings: Any) -> ProxyServer:
        return proxy_factory(backend=backend.url, chat_template=str(template), **settings)

    return make


def test_past_max_render_ms_a_request_is_a_400_and_the_next_is_served(slow_if_asked) -> None:
    proxy = slow_if_asked(max_render_ms=300, prepare_workers=1)
    refused = post(proxy, heavy("slow", tag="refused"))
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "request_too_complex"
    for _ in range(3):  # the worker is free again and prepares the next ones
        assert post(proxy, heavy()).status_code == 200


def test_a_refused_conversation_sent_again_is_still_bounded(slow_if_asked) -> None:
    """The messages of a request refused as too complex are not reused by the next one: sent again
    with one more message, it is prepared by a worker and refused again, never rendered on the
    loop without a bound."""
    proxy = slow_if_asked(max_render_ms=300, prepare_workers=1)
    again = heavy("slow", tag="refused twice")
    assert post(proxy, again).json()["error"]["code"] == "request_too_complex"
    again["messages"].append({"role": "user", "content": "and again"})
    refused = post(proxy, again)
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "request_too_complex"


def test_a_burst_of_heavy_requests_waits_its_turn_instead_of_503(slow_if_asked) -> None:
    """Twice as many heavy requests at once as the old bound of 8 jobs: every one answered."""
    proxy = slow_if_asked(max_render_ms=10_000)

    async def burst() -> list[int]:
        async with httpx.AsyncClient(timeout=120) as client:
            replies = await asyncio.gather(*(client.post(proxy.url + "/v1/chat/completions", json=heavy())
                                             for _ in range(16)))
        return [r.status_code for r in replies]

    assert asyncio.run(burst()) == [200] * 16


def test_past_max_queue_ms_a_heavy_request_is_a_503_to_retry(slow_if_asked, tmp_path) -> None:
    """The one worker is held by a job the test lets go: a heavy request waits past
    ``--max-queue-ms`` and is refused with ``Retry-After``; a light one is served inline meanwhile;
    once the worker is free, heavy requests are served again."""
    from tests.app.pipeline.test_pool import Hold

    proxy = slow_if_asked(max_render_ms=30_000, prepare_workers=1, max_queue_ms=300)
    hold = Hold(tmp_path)
    pool = proxy.runtime.services.pool
    holding = proxy.call(pool.run(None, held_job, str(hold.started), str(hold.release)))
    asyncio.run(hold.running())  # the worker is taken until the test lets it go
    busy = post(proxy, heavy("queued"))
    assert busy.status_code == 503, busy.text
    assert busy.json()["error"]["code"] == "server_busy" and busy.headers["Retry-After"] == "1"
    assert post(proxy, {"model": "m", "messages": MESSAGES}).status_code == 200  # light: inline, not queued
    asyncio.run(hold.let_go())
    assert holding.result(60) == 2
    assert post(proxy, heavy()).status_code == 200


def held_job(started: str, release: str) -> int:
    from tests.app.pipeline.test_pool import held

    return held(started, release)


def test_a_worker_killed_mid_request_costs_no_500(slow_if_asked) -> None:
    """Killed from outside while it prepares a request, a worker costs nobody an error: the request
    is prepared again by a fresh worker and answered (a job that loses its worker twice is a 503 to
    retry: ``tests/app/pipeline/test_pool.py`` holds a job to show it). Never a 500."""
    proxy = slow_if_asked(max_render_ms=60_000, prepare_workers=1, prefix_cache_bytes=0)  # every one heavy
    pool = proxy.runtime.services.pool
    assert post(proxy, heavy(tag="warm")).status_code == 200  # the worker is up
    killed: list[int] = []

    for k in range(4):
        response: dict[str, httpx.Response] = {}
        sender = threading.Thread(target=lambda k=k, response=response: response.setdefault(
            "r", post(proxy, heavy("medium", tag=f"killed {k}"))))
        sender.start()
        until(lambda: in_flight(proxy) > 0 and bool(pool.workers()), "the request's job in a worker")
        pid = pool.workers()[0]
        os.kill(pid, signal.SIGKILL)
        killed.append(pid)
        sender.join(120)
        got = response["r"]
        assert got.status_code in (200, 503), got.text
        if got.status_code == 503:
            assert got.headers["Retry-After"] == "1" and got.json()["error"]["code"] == "worker_lost"
    assert len(set(killed)) == 4  # a fresh worker each time
    assert post(proxy, heavy(tag="after")).status_code == 200


def _tool(name: str) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "parameters": {
        "type": "object", "properties": {f"{name}_{os.getpid()}_{time.monotonic_ns()}": {"type": "string"}}}}}


def _big_tool(name: str) -> dict[str, Any]:
    """A tool whose schema is over 1 KB (~5 ms to check)."""
    tool = _tool(name)
    tool["function"]["parameters"]["properties"].update(
        {f"p{k}": {"type": "string", "description": "d" * 40} for k in range(30)})
    return tool


def count_schema_checks() -> int:
    """In a worker: count the JSON-schema checks it makes from now on."""
    from jsonschema import Draft202012Validator

    made = [0]
    check = Draft202012Validator.check_schema.__func__  # type: ignore[attr-defined]

    def counted(cls: Any, schema: Any, *args: Any, **kwargs: Any) -> None:
        made[0] += 1
        check(cls, schema, *args, **kwargs)

    Draft202012Validator.check_schema = classmethod(counted)  # type: ignore[method-assign, assignment]
    globals()["_made"] = made
    return 0


def schema_checks_made() -> int:
    return int(globals()["_made"][0])


def test_a_schema_is_checked_once_whichever_process_prepares_it(slow_if_asked) -> None:
    """The server and its prepare workers share what they know of schema checks: a tool checked on
    the loop is not checked again by the worker that prepares the next heavy request, and a tool a
    worker checked is known to the server — an agent's light next turn is not checked again on the
    loop (a 1.5 KB schema costs ~7 ms to check)."""
    import orjson

    from app.pipeline.validate import VERDICTS, SchemaVerdicts

    proxy = slow_if_asked(max_render_ms=60_000, prepare_workers=1)
    pool = proxy.runtime.services.pool
    seen, new = _tool("seen"), _big_tool("new")
    assert post(proxy, {"model": "m", "messages": MESSAGES, "tools": [seen]}).status_code == 200  # on the loop
    assert proxy.call(pool.run(None, count_schema_checks)).result(60) == 0
    # heavy by its new schema (> 1 KB not checked here): in the worker, which is told of the other
    assert post(proxy, {"model": "m", "messages": MESSAGES, "tools": [seen, new]}).status_code == 200
    assert proxy.call(pool.run(None, schema_checks_made)).result(60) == 1  # the new one alone
    key = SchemaVerdicts.key(orjson.dumps(new["function"]["parameters"], option=orjson.OPT_SORT_KEYS))
    assert VERDICTS.known(key)  # the server knows it


def test_a_request_heavy_by_its_length_carries_the_checks_of_its_tools(slow_if_asked) -> None:
    """A request prepared by a worker for its length (over 64 messages), not its schemas: the tools
    the server checked are not checked again there (an agent's conversation grows past the bound
    with the same tools; each 1.5 KB schema ~7 ms)."""
    proxy = slow_if_asked(max_render_ms=60_000, prepare_workers=1)
    pool = proxy.runtime.services.pool
    seen = _tool("seen")
    assert proxy.call(pool.run(None, count_schema_checks)).result(60) == 0
    assert post(proxy, {"model": "m", "messages": MESSAGES, "tools": [seen]}).status_code == 200  # on the loop
    assert proxy.call(pool.run(None, schema_checks_made)).result(60) == 0
    assert post(proxy, {**heavy(), "tools": [seen]}).status_code == 200  # in the worker
    assert proxy.call(pool.run(None, schema_checks_made)).result(60) == 0  # known: not checked again


def test_a_new_clients_tool_schemas_are_checked_off_the_loop(slow_if_asked, monkeypatch) -> None:
    """A request small in every other way whose tool schemas this server has not checked before —
    more than 1 KB of them, ~5 ms of checking — is prepared by a worker, not on the loop every other
    stream shares; sent again, its tools known, it is prepared inline."""
    from app.pipeline.prepare import prepare_job

    proxy = slow_if_asked(max_render_ms=60_000, prepare_workers=1)
    pool = proxy.runtime.services.pool
    big = _big_tool("big")
    small = {"model": "m", "messages": MESSAGES, "tools": [_tool("small")]}
    assert proxy.call(pool.run(None, count_schema_checks)).result(60) == 0
    jobs: list[Any] = []
    run = pool.run
    monkeypatch.setattr(pool, "run", lambda model, work, *args: (jobs.append(work), run(model, work, *args))[1])
    assert post(proxy, small).status_code == 200  # a small schema not seen before: inline
    body = {"model": "m", "messages": MESSAGES, "tools": [big]}
    assert post(proxy, body).status_code == 200
    assert jobs == [prepare_job]
    assert post(proxy, body).status_code == 200
    assert jobs == [prepare_job]  # known now: inline
    monkeypatch.undo()
    assert proxy.call(pool.run(None, schema_checks_made)).result(60) == 1  # the big one, in the worker


# -------------------------------------------------------------- 2. the schema cache holds digests

def test_schema_cache_does_not_pin_the_schemas() -> None:
    from app.pipeline.validate import schema_problem

    def schema(i: int) -> bytes:
        props = {f"p{i}_{k}": {"type": "string", "description": "x" * 200} for k in range(300)}
        return json.dumps({"type": "object", "properties": props}).encode()  # ~70 KB each

    gc.collect()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    for i in range(60):
        assert schema_problem(schema(i)) is None
    gc.collect()
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    retained = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    assert retained < 1_000_000, f"{retained} bytes retained after checking 60 schemas of ~70 KB"


# -------------------------------------------------------------- 3. client input never gives a 500

def deep(depth: int, leaf: Any) -> Any:
    value = leaf
    for _ in range(depth):
        value = {"type": "array", "items": value}
    return value


@pytest.mark.parametrize(("body", "where"), [
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"x": deep(120, {"type": "string"})}}}}]}, "tools[0].function.parameters"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": deep(300, {})}}]},
     "tools[0].function.parameters"),
    ({"chat_template_kwargs": {"messages": []}}, "chat_template_kwargs.messages"),
    ({"chat_template_kwargs": {"tools": []}}, "chat_template_kwargs.tools"),
    ({"chat_template_kwargs": {"add_generation_prompt": False}}, "chat_template_kwargs.add_generation_prompt"),
    ({"chat_template_kwargs": {"self": 1}}, "chat_template_kwargs.self"),
])
def test_hostile_input_is_a_400_naming_the_field(vllm, body: dict[str, Any], where: str) -> None:
    _, make = vllm
    response = post(make(), {"model": "m", "messages": MESSAGES, **body})
    assert response.status_code == 400, response.text
    assert where in response.json()["error"]["message"], response.text
    assert response.headers.get("x-request-id")


def test_an_internal_error_is_a_500_with_a_request_id_logged_once(vllm, monkeypatch, caplog) -> None:
    from app.api.chat import routes as chat

    _, make = vllm
    proxy = make()

    async def broken(*args: Any) -> Any:
        raise RuntimeError("a bug")

    monkeypatch.setattr(chat, "respond", broken)
    with caplog.at_level(logging.ERROR, logger="toolwire"):
        response = post(proxy, {"model": "m", "messages": MESSAGES}, headers={"x-request-id": "req-500-test"})
    assert response.status_code == 500
    assert response.json()["error"]["type"] == "server_error" and "a bug" not in response.text
    assert response.headers["x-request-id"] == "req-500-test"
    assert len([r for r in caplog.records if r.exc_info]) == 1


# -------------------------------------------------------------- 4. a backend's wrong-shaped JSON

BAD_EVENTS = {
    "vllm": [b'data: {"choices": [{"text": 5}]}\n\n', b'data: {"choices": [{"text": ["a"]}]}\n\n',
             b'data: {"choices": "abc"}\n\n', b'data: {"choices": {"text": "a"}}\n\n', b'data: {"choices": ["a"]}\n\n',
             b'data: {"choices": [], "usage": "lots"}\n\n'],
    "llamacpp": [b'data: {"content": 5, "stop": false}\n\n', b'data: {"content": ["a"], "stop": false}\n\n',
                 b'data: {"content": "", "stop": true, "tokens_evaluated": "many", "timings": "x"}\n\n'],
}


@pytest.mark.parametrize(("kind", "raw"), [(k, r) for k, rs in BAD_EVENTS.items() for r in rs])
def test_wrong_shaped_backend_json(kind: str, raw: bytes, backend_factory, proxy_factory) -> None:
    backend = backend_factory(kind, model="Qwen/Qwen3-8B")
    proxy = proxy_factory(backend=backend.url, chat_template=str(QWEN3_TEMPLATE))
    benign = b'"tokens_evaluated": "many"' in raw  # a counter of the wrong type is read as 0, not an error
    backend.script(Script(pieces=["Hello"], fault="raw", raw=raw, fault_after=0))
    before = post(proxy, {"model": "m", "messages": MESSAGES})
    if benign:
        assert before.status_code == 200, before.text
        return
    assert before.status_code == 502, before.text
    assert before.json()["error"]["type"] == "server_error"
    backend.script(Script(pieces=["Hello", " there"], fault="raw", raw=raw, fault_after=1))
    during = post(proxy, {"model": "m", "messages": MESSAGES, "stream": True})
    assert during.status_code == 200
    events = sse_events(during)
    text = "".join(e["choices"][0]["delta"].get("content") or "" for e in events if e.get("choices"))
    assert text == "Hello"
    assert "error" in events[-1] and "unexpected shape" in events[-1]["error"]["message"]


# ------------------------------------------- 5. a client that leaves before the first byte is noticed

@pytest.mark.parametrize(("path", "stream"), [("/v1/chat/completions", False), ("/v1/chat/completions", True),
                                              ("/v1/completions", False), ("/v1/completions", True)])
def test_leaving_before_the_first_byte_closes_upstream_and_frees_the_slot(vllm, path: str, stream: bool) -> None:
    backend, make = vllm
    proxy = make(max_concurrency=1)
    held = Gate()  # the backend sends nothing until the client has left (never, here)
    backend.script(Script(pieces=["late"], hold=held))
    body = {"model": "m", "messages": MESSAGES, "stream": stream} if "chat" in path else \
        {"model": "m", "prompt": "hi", "stream": stream}

    async def leave_early() -> None:
        async with httpx.AsyncClient(timeout=60) as client:
            asking = asyncio.ensure_future(client.post(proxy.url + path, json=body))
            await asyncio.to_thread(held.reached.wait, 30)  # the request is at the backend, no byte back yet
            asking.cancel()  # the client leaves
            with contextlib.suppress(asyncio.CancelledError):
                await asking

    asyncio.run(leave_early())
    deadline = time.monotonic() + 4
    while backend.seen[-1].closed is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert backend.seen[-1].closed is not None, "the upstream request stayed open"
    backend.script(Script(pieces=["ok"]))
    assert post(proxy, {"model": "m", "messages": MESSAGES}).status_code == 200  # the slot is free


# ------------------------------------------------------------ 6. /v1/completions within the limits

def test_completions_passthrough_applies_the_limits(vllm) -> None:
    backend, make = vllm
    proxy = make(max_tokens_cap=64, max_tokens_policy="reject")
    response = post(proxy, {"model": "m", "prompt": "hi", "max_tokens": 5000}, path="/v1/completions")
    assert response.status_code == 400 and "max_tokens" in response.json()["error"]["message"]
    response = post(proxy, {"model": "m", "prompt": {"not": "a prompt"}}, path="/v1/completions")
    assert response.status_code == 400
    backend.script(Script(pieces=["ok"]))
    assert post(proxy, {"model": "m", "prompt": "hi"}, path="/v1/completions").status_code == 200
    assert backend.bodies()[-1]["max_tokens"] == 64  # unbounded requests get the cap
    backend.script(Script(pieces=["ok"]))
    assert post(proxy, {"model": "m", "messages": MESSAGES}).status_code == 200
    assert backend.bodies()[-1]["max_tokens"] == 64  # on chat too


# -------------------------------------------------------------------- 7. --workers keeps its keys

def test_keys_reach_workers_whole(monkeypatch) -> None:
    from app.cli import export_env
    from app.settings import Settings

    for name in list(os.environ):
        if name.startswith("TOOLWIRE_"):
            monkeypatch.delenv(name)
    before = dict(os.environ)
    try:
        export_env(Settings(api_key=["Str0ng,x", "other"]))  # writes os.environ, as for worker processes
        assert Settings().accepted_keys() == ["Str0ng,x", "other"]
        os.environ["TOOLWIRE_API_KEY"] = "a, b"  # what an operator writes stays comma-separated
        assert Settings().accepted_keys() == ["a", "b"]
    finally:
        os.environ.clear()
        os.environ.update(before)


# -------------------------------------------------------------- 8. SSE lines: linear and bounded

def test_a_backend_line_without_end_is_a_clear_error(vllm) -> None:
    backend, make = vllm
    proxy = make()
    backend.script(Script(pieces=["Hi"], fault="raw", raw=b"data: " + b"x" * (9 << 20), fault_after=1))
    events = sse_events(post(proxy, {"model": "m", "messages": MESSAGES, "stream": True}))
    assert "longer than" in events[-1]["error"]["message"]


def test_sse_lines_split_over_many_reads_are_joined_once() -> None:
    from app.backends.base import Backend

    class Reads:
        def __init__(self, parts: list[bytes]) -> None:
            self.parts = parts

        async def aiter_bytes(self) -> Any:
            for part in self.parts:
                yield part

    line = b'data: {"choices": [{"text": "' + b"y" * 200_000 + b'"}]}\n\n'
    parts = [line[i:i + 7] for i in range(0, len(line), 7)] + [b"data: [DONE]\n\n"]

    async def collect() -> list[Any]:
        backend = Backend("http://x", httpx.AsyncClient())
        return [event async for batch in backend.sse_batches(Reads(parts)) for event in batch]  # type: ignore[arg-type]

    events = asyncio.run(collect())  # its speed is bench/'s business (no timed assertions in tests)
    assert events[0]["choices"][0]["text"] == "y" * 200_000 and events[1] is None


# -------------------------------------------------------- 9. streams cut at shutdown end cleanly

def test_a_stream_still_open_at_shutdown_ends_with_an_error_event(vllm) -> None:
    backend, make = vllm
    proxy = make()
    backend.script(Script(pieces=["Hello", " world"], hold=Gate(), hold_after=1))  # stalls after one piece, for good
    received: list[bytes] = []
    done = threading.Event()

    def read() -> None:
        with httpx.stream("POST", proxy.url + "/v1/chat/completions", timeout=60,
                          json={"model": "m", "messages": MESSAGES, "stream": True}) as response:
            received.extend(response.iter_bytes())
        done.set()

    reader = threading.Thread(target=read)
    reader.start()
    deadline = time.monotonic() + 10
    while not received and time.monotonic() < deadline:
        time.sleep(0.05)
    proxy.stop()  # the grace (2 s here) runs out while the backend stalls
    assert done.wait(20), "the stream never ended"
    text = b"".join(received).decode()
    last = [line for line in text.splitlines() if line.startswith("data: ")][-1]
    assert "shutting down" in json.loads(last[6:])["error"]["message"]


# -------------------------------------------- 10. tool names follow MCP's rule (issue 25)

@pytest.mark.parametrize("name", ['get"weather', "a b", "x" * 129, "名前", ""])
def test_tool_names_are_checked(vllm, name: str) -> None:
    _, make = vllm
    tool = {"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}
    response = post(make(), {"model": "m", "messages": MESSAGES, "tools": [tool], "tool_choice": "required"})
    assert response.status_code == 400
    assert "name" in response.json()["error"]["message"]


# ------------------------------------------------------------------------- 11. smaller exposure

def test_smaller_exposure(vllm) -> None:
    _backend, make = vllm
    proxy = make(api_key=["k1"], header_timeout=1)
    auth = {"authorization": "Bearer k1"}
    assert httpx.get(proxy.url + "/openapi.json", timeout=10).status_code == 404
    plain = httpx.post(proxy.url + "/v1/chat/completions", content=json.dumps({"model": "m", "messages": MESSAGES}),
                       headers={**auth, "content-type": "text/plain"}, timeout=10)
    assert plain.status_code == 415
    twice = httpx.post(proxy.url + "/v1/chat/completions", json={"model": "m", "messages": MESSAGES}, timeout=10,
                       headers=[("authorization", "Bearer k1"), ("authorization", "Bearer other")])
    assert twice.status_code == 400
    health = httpx.get(proxy.url + "/health", timeout=10).json()
    assert health["status"] == "ok" and "backend" not in health and "template" not in health
    assert "backend" in httpx.get(proxy.url + "/health", headers=auth, timeout=10).json()
    # slow headers: the connection is closed after --header-timeout
    with socket.create_connection(("127.0.0.1", proxy.settings.port), timeout=10) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
        started = time.monotonic()
        assert sock.recv(1024) == b""  # closed by the server
        assert time.monotonic() - started < 8


# --------------------------------------------------------- 12. calls per answer are bounded

def test_calls_beyond_the_bound_are_content(vllm) -> None:
    backend, make = vllm
    proxy = make(max_calls_per_answer=3)
    call = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "C%d"}}\n</tool_call>\n'
    pieces = [call % i for i in range(5)]
    for stream in (False, True):
        backend.script(Script(pieces=pieces))
        if stream:
            with client_for(proxy).chat.completions.stream(model="m", messages=MESSAGES, tools=[TOOL]) as s:
                message = s.get_final_completion().choices[0].message
        else:
            message = client_for(proxy).chat.completions.create(model="m", messages=MESSAGES,
                                                                tools=[TOOL]).choices[0].message
        assert [json.loads(c.function.arguments)["city"] for c in message.tool_calls or []] == ["C0", "C1", "C2"]
        assert message.content is not None and '"city": "C3"' in message.content and '"C4"' in message.content
