"""Background responses (``background: true``) over HTTP with the official ``openai`` SDK: created
``queued`` and generated without the client, polled until they end (OpenAI's own polling pattern),
cancelled mid-generation (the backend's connection closed), their event stream resumed from any
sequence number, bounded per process, owned by their key, failed — never left ``in_progress`` —
when their server stops (a graceful stop, and a SIGKILL), and shared by two replicas on one Redis:
any of them polls, resumes or cancels what the other generates."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
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
from tests.scripted_backend import Gate, Script, ScriptedBackend
from tests.test_responses import EVENT_CLASSES, raw_events
from tests.test_store_faults import _serve, _wait_up

PIECES = ["<think>", "\nA plan.\n", "</think>", "\n\n", "Once ", "upon ", "a ", "time."]


def slow() -> Script:
    """Three words, then nothing more until the request is closed (a generation under way for as
    long as the test needs it to be)."""
    return Script(pieces=["word "] * 400, hold=Gate(), hold_after=3)


UNFINISHED = ("queued", "in_progress")


def events_of(response: httpx.Response) -> list[dict[str, Any]]:
    """The ``data:`` payloads of an SSE response, each checked against its ``event:`` line and the
    SDK's own type for it."""
    events = raw_events(response)
    for payload in events:
        EVENT_CLASSES[payload["type"]].model_validate(payload)  # type: ignore[attr-defined]
    return events


def resume(proxy: ProxyServer, response_id: str, after: int | None = None, key: str = "unused") -> httpx.Response:
    query = "stream=true" + ("" if after is None else f"&starting_after={after}")
    return httpx.get(f"{proxy.url}/v1/responses/{response_id}?{query}", timeout=60,
                     headers={"authorization": f"Bearer {key}"})


def poll(client: openai.OpenAI, response_id: str, until: Callable[[Any], bool], timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        response = client.responses.retrieve(response_id)
        if until(response):
            return response
        assert time.monotonic() < deadline, f"still {response.status}"
        time.sleep(0.05)


def wait_for(condition: Callable[[], bool], timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


@pytest.fixture
def proxy(backend_factory: Callable[..., ScriptedBackend],
          proxy_factory: Callable[..., ProxyServer]) -> tuple[ScriptedBackend, ProxyServer]:
    backend = backend_factory("vllm", model="Qwen/Qwen3-8B")
    return backend, proxy_factory(backend=backend.url, chat_template=str(QWEN3_TEMPLATE), reasoning_parser="qwen3",
                                  tool_call_parser="qwen25")


def test_create_then_poll_as_openai_documents_it(proxy) -> None:
    backend, server = proxy
    client = client_for(server)
    under_way = Gate()  # generation stays under way until a poll has seen it so
    backend.script(Script(pieces=PIECES), Script(pieces=PIECES, hold=under_way, hold_after=2))
    foreground = client.responses.create(model="m", input="A story.")
    # OpenAI's polling pattern (developers.openai.com, background mode)
    resp = client.responses.create(model="m", input="A story.", background=True)
    assert resp.status == "queued" and resp.background is True and resp.output == []
    seen = {resp.status}
    while resp.status in {"queued", "in_progress"}:
        time.sleep(0.02)
        resp = client.responses.retrieve(resp.id)
        seen.add(resp.status)
        if resp.status == "in_progress":
            under_way.open()
    assert resp.status == "completed" and "in_progress" in seen
    assert resp.output_text == foreground.output_text == "Once upon a time."
    assert [item.type for item in resp.output] == [item.type for item in foreground.output] == ["reasoning", "message"]
    assert resp.usage is not None and resp.usage.output_tokens == len(PIECES)
    assert backend.bodies()[-1]["prompt"] == backend.bodies()[0]["prompt"]  # the same request reached the backend
    # it is a stored response like any other: listed input, continued by previous_response_id
    assert client.responses.input_items.list(resp.id).data[0].content[0].text == "A story."  # type: ignore[union-attr]
    backend.script(Script(pieces=["The end."]))
    after = client.responses.create(model="m", input="And then?", previous_response_id=resp.id)
    assert "Once upon a time." in backend.bodies()[-1]["prompt"] and after.output_text == "The end."


def test_a_backend_failure_ends_a_background_response_failed(proxy) -> None:
    backend, server = proxy
    client = client_for(server)
    backend.script(Script(status=400, error_message="context length exceeded"))
    refused = poll(client, client.responses.create(model="m", input="x", background=True).id,
                   lambda r: r.status not in UNFINISHED)
    assert refused.status == "failed" and "context length exceeded" in refused.error.message  # type: ignore[union-attr]
    backend.script(Script(pieces=["Hello", " world", "!"], fault="drop", fault_after=2, delay=0.01))
    dropped = poll(client, client.responses.create(model="m", input="x", background=True).id,
                   lambda r: r.status not in UNFINISHED)
    assert dropped.status == "failed" and dropped.output_text == "Hello world"  # the output it had
    events = events_of(resume(server, dropped.id))
    assert [e["type"] for e in events[-2:]] == ["error", "response.failed"]


@pytest.mark.parametrize("policy", ["clamp", "reject"])
def test_max_tokens_is_fitted_before_a_background_response_is_accepted(policy: str, backend_factory,
                                                                         proxy_factory) -> None:
    backend = backend_factory("vllm", model="Qwen/Qwen3-8B")
    server = proxy_factory(backend=backend.url, chat_template=str(QWEN3_TEMPLATE), max_tokens_cap=50,
                           max_tokens_policy=policy)
    client = client_for(server)
    backend.script(Script(pieces=["Short."]))
    if policy == "reject":  # refused at once: no response is created to fail later
        with pytest.raises(openai.BadRequestError, match="cap of 50"):
            client.responses.create(model="m", input="x", background=True, max_output_tokens=100)
        assert not backend.bodies()
        return
    raw = client.responses.with_raw_response.create(model="m", input="x", background=True, max_output_tokens=100)
    assert raw.headers["x-toolwire-max-tokens"] == "clamped from 100 to 50 (--max-tokens-cap 50)"
    assert poll(client, raw.parse().id, lambda r: r.status == "completed").output_text == "Short."
    assert backend.bodies()[-1]["max_tokens"] == 50


def test_a_background_response_too_large_to_store_ends_failed_without_its_output(backend_factory,
                                                                                 proxy_factory) -> None:
    """--max-stored-response-bytes bounds what a background run stores at its end too: an answer past
    it is stored ``failed`` (its output not kept), never left ``in_progress`` or stored whole."""
    backend = backend_factory("vllm", model="Qwen/Qwen3-8B")
    server = proxy_factory(backend=backend.url, chat_template=str(QWEN3_TEMPLATE), max_stored_response_bytes=65536)
    client = client_for(server)
    backend.script(Script(pieces=["many words " * 100] * 80))  # ~88 KB of output
    ended = poll(client, client.responses.create(model="m", input="x", background=True).id,
                 lambda r: r.status not in UNFINISHED)
    assert ended.status == "failed" and ended.output == []
    assert "--max-stored-response-bytes" in ended.error.message  # type: ignore[union-attr]
    backend.script(Script(pieces=["Short."]))
    small = poll(client, client.responses.create(model="m", input="x", background=True).id,
                 lambda r: r.status not in UNFINISHED)
    assert small.status == "completed" and small.output_text == "Short."


def test_a_background_response_survives_its_client_leaving(proxy) -> None:
    backend, server = proxy
    rest = Gate()  # the rest of the answer comes once the client has left
    backend.script(Script(pieces=["tick "] * 30, hold=rest, hold_after=1))
    with httpx.stream("POST", server.url + "/v1/responses", timeout=30,
                      json={"model": "m", "input": "x", "background": True, "stream": True}) as live:
        lines = live.iter_lines()
        first = next(line for line in lines if line.startswith("data: "))
        response_id = json.loads(first[6:])["response"]["id"]
        next(line for line in lines if "output_text.delta" in line)
    rest.open()
    # the client is gone, the backend still streams
    done = poll(client_for(server), response_id, lambda r: r.status not in UNFINISHED)
    assert done.status == "completed" and done.output_text == "tick " * 30  # every piece, though nobody read them


def test_cancel_mid_generation_closes_the_backend_request(proxy) -> None:
    backend, server = proxy
    client = client_for(server)
    backend.script(slow())
    resp = client.responses.create(model="m", input="x", background=True)
    poll(client, resp.id, lambda r: r.status == "in_progress")
    wait_for(lambda: bool(backend.seen))
    with pytest.raises(openai.BadRequestError, match="has not ended yet"):  # nothing to continue from yet
        client.responses.create(model="m", input="more", previous_response_id=resp.id)
    cancelled = client.responses.cancel(resp.id)
    assert cancelled.status == "cancelled" and cancelled.id == resp.id
    # the backend holds the rest for good: only the cancel can close its request (the read timeout is 300 s)
    wait_for(lambda: backend.seen[-1].closed is not None, timeout=10)
    final = poll(client, resp.id, lambda r: r.status == "cancelled" and r.output)  # the generator's partial output
    assert final.output_text.startswith("word ") and len(final.output_text) < len("word ") * 400
    assert client.responses.cancel(resp.id).status == "cancelled"  # cancelling twice is cancelling once
    events = events_of(resume(server, resp.id))
    assert events[-1]["type"] == "error" and events[-1]["code"] == "response_cancelled"
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    # a finished background response cancelled: as it ended; a foreground one: 400; none: 404
    backend.script(Script(pieces=["Done."]))
    quick = client.responses.create(model="m", input="x", background=True)
    poll(client, quick.id, lambda r: r.status == "completed")
    assert client.responses.cancel(quick.id).status == "completed"
    backend.script(Script(pieces=["Done."]))
    foreground = client.responses.create(model="m", input="x")
    with pytest.raises(openai.BadRequestError, match="background"):
        client.responses.cancel(foreground.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.cancel("resp_nothing_here")


def test_the_stream_resumes_after_any_event(proxy) -> None:
    backend, server = proxy
    client = client_for(server)
    backend.script(Script(pieces=PIECES, delay=0.02))
    created = httpx.post(server.url + "/v1/responses", timeout=30,
                         json={"model": "m", "input": "x", "background": True, "stream": True})
    original = events_of(created)
    assert [e["type"] for e in original[:3]] == ["response.created", "response.queued", "response.in_progress"]
    assert original[0]["response"]["status"] == "queued" and original[-1]["type"] == "response.completed"
    assert [e["sequence_number"] for e in original] == list(range(len(original)))
    response_id = original[0]["response"]["id"]
    assert original[-1]["response"] == client.responses.retrieve(response_id).model_dump(mode="json",
                                                                                         exclude_unset=True)
    assert events_of(resume(server, response_id)) == original
    for after in (0, 2, 5, len(original) // 2, len(original) - 2, len(original) - 1, len(original) + 5):
        assert events_of(resume(server, response_id, after)) == original[after + 1:], after
    # the SDK: the raw stream from a cursor, and its stream helper (which accumulates the response)
    typed = list(client.responses.retrieve(response_id, stream=True, starting_after=4))
    assert [e.sequence_number for e in typed] == list(range(5, len(original)))
    with client.responses.stream(response_id=response_id, starting_after=4) as stream:
        assert [e.sequence_number for e in stream] == list(range(5, len(original)))
        assert stream.get_final_response().output_text == "Once upon a time."
    bad = httpx.get(f"{server.url}/v1/responses/{response_id}?stream=true&starting_after=soon", timeout=10)
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "starting_after"
    backend.script(Script(pieces=["Done."]))
    foreground = client.responses.create(model="m", input="x")
    refused = resume(server, foreground.id)
    assert refused.status_code == 400 and "background" in refused.json()["error"]["message"]


def test_a_resumed_stream_follows_a_response_still_generating(proxy) -> None:
    backend, server = proxy
    client = client_for(server)
    rest = Gate()  # generation stays under way until the resumed stream has begun
    backend.script(Script(pieces=[f"w{i} " for i in range(40)], hold=rest, hold_after=5))
    resp = client.responses.create(model="m", input="x", background=True)
    poll(client, resp.id, lambda r: r.status == "in_progress")
    assert rest.reached.wait(30)  # five words made; the rest waits
    lines: list[str] = []
    with httpx.stream("GET", f"{server.url}/v1/responses/{resp.id}?stream=true&starting_after=3",
                      timeout=60) as resumed:
        for line in resumed.iter_lines():
            lines.append(line)
            if line.startswith("data: ") and not rest.is_open:
                rest.open()  # the resumed stream has begun, and the response goes on
    followed = [json.loads(line[6:]) for line in lines if line.startswith("data: ")]
    assert followed[-1]["type"] == "response.completed"
    assert [e["sequence_number"] for e in followed] == list(range(4, followed[-1]["sequence_number"] + 1))
    text = "".join(e["delta"] for e in followed if e["type"] == "response.output_text.delta")
    assert text == "".join(f"w{i} " for i in range(40))
    assert events_of(resume(server, resp.id, 3)) == followed


def test_background_needs_the_store_and_stays_within_its_bound(backend_factory, proxy_factory) -> None:
    backend = backend_factory("vllm", model="Qwen/Qwen3-8B")
    server = proxy_factory(backend=backend.url, chat_template=str(QWEN3_TEMPLATE), max_background=1,
                           max_concurrency=1)
    client = client_for(server)
    backend.script(slow())
    first = client.responses.create(model="m", input="x", background=True)
    with pytest.raises(openai.RateLimitError) as refused:
        client.responses.create(model="m", input="x", background=True)
    assert refused.value.response.headers["retry-after"] == "1"
    # the background response holds no concurrency slot: a foreground request still gets one
    backend.script(Script(pieces=["Foreground."]))
    assert client.responses.create(model="m", input="x").output_text == "Foreground."
    client.responses.cancel(first.id)
    wait_for(lambda: server.runtime.services.detached.used == 0)
    backend.script(Script(pieces=["Next."]))
    second = client.responses.create(model="m", input="x", background=True)
    assert poll(client, second.id, lambda r: r.status == "completed").output_text == "Next."
    metrics = httpx.get(server.url + "/metrics", timeout=10).text
    assert 'toolwire_rejected_total{reason="background"} 1.0' in metrics
    with pytest.raises(openai.BadRequestError, match="store"):
        client.responses.create(model="m", input="x", background=True, store=False)


def test_the_event_log_is_bounded_and_the_response_goes_on(backend_factory, proxy_factory) -> None:
    backend = backend_factory("vllm", model="Qwen/Qwen3-8B")
    server = proxy_factory(backend=backend.url, chat_template=str(QWEN3_TEMPLATE),
                           background_events_max_bytes=64 << 10)
    client = client_for(server)
    backend.script(Script(pieces=["y" * 1000] * 100))  # ~100 KiB of deltas
    resp = client.responses.create(model="m", input="x", background=True)
    done = poll(client, resp.id, lambda r: r.status not in UNFINISHED)
    assert done.status == "completed" and done.output_text == "y" * 100_000
    events = events_of(resume(server, resp.id))
    assert events[-1]["type"] == "error" and events[-1]["code"] == "stream_too_large"
    assert sum(len(json.dumps(e)) for e in events) < 70 << 10
    assert [e["sequence_number"] for e in events[:-1]] == list(range(len(events) - 1))


def test_another_key_sees_a_background_response_as_missing(backend_factory, proxy_factory) -> None:
    backend = backend_factory("vllm", model="Qwen/Qwen3-8B")
    server = proxy_factory(backend=backend.url, chat_template=str(QWEN3_TEMPLATE), api_key=["key-a", "key-b"])
    alice, bob = client_for(server, "key-a"), client_for(server, "key-b")
    backend.script(slow())
    resp = alice.responses.create(model="m", input="x", background=True)
    for attempt in (lambda: bob.responses.retrieve(resp.id), lambda: bob.responses.cancel(resp.id),
                    lambda: list(bob.responses.retrieve(resp.id, stream=True)),
                    lambda: bob.responses.delete(resp.id)):
        with pytest.raises(openai.NotFoundError):
            attempt()
    assert resume(server, resp.id, key="key-b").status_code == 404
    assert alice.responses.retrieve(resp.id).status in UNFINISHED  # Bob's cancel and delete did nothing
    alice.responses.delete(resp.id)  # deleting it under way cancels it first
    wait_for(lambda: backend.seen[-1].closed is not None, timeout=10)
    with pytest.raises(openai.NotFoundError):
        alice.responses.retrieve(resp.id)
    wait_for(lambda: server.runtime.services.detached.used == 0)  # its task has ended …
    with pytest.raises(openai.NotFoundError):  # … and did not store it again as it ended
        alice.responses.retrieve(resp.id)


def test_a_graceful_restart_marks_an_unfinished_response_failed(backend_factory, tmp_path: Path) -> None:
    backend = backend_factory("vllm", model="Qwen/Qwen3-8B")
    settings = {"backend": backend.url, "chat_template": str(QWEN3_TEMPLATE), "state_dir": str(tmp_path)}
    first = ProxyServer(**settings).start()
    backend.script(slow())
    client = client_for(first)
    resp = client.responses.create(model="m", input="x", background=True)
    poll(client, resp.id, lambda r: r.status == "in_progress")
    first.stop()
    assert backend.seen[-1].closed is not None  # the task was cancelled at shutdown: the backend request closed
    second = ProxyServer(**settings).start()
    try:
        failed = client_for(second).responses.retrieve(resp.id)
        assert failed.status == "failed" and "shut down" in failed.error.message  # type: ignore[union-attr]
        events = events_of(resume(second, resp.id))
        assert [e["type"] for e in events[-2:]] == ["error", "response.failed"]
        assert events[-2]["code"] == "server_shutting_down"
    finally:
        second.stop()


def test_a_killed_server_leaves_no_response_in_progress_forever(backend_factory, tmp_path: Path) -> None:
    backend = backend_factory("vllm", model="Qwen/Qwen3-8B")
    port = free_port()
    process = _serve(["--backend", backend.url, "--port", str(port), "--state-dir", str(tmp_path),
                      "--chat-template", str(QWEN3_TEMPLATE)], tmp_path)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_up(url, process)
        killed = openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0)
        backend.script(slow())
        resp = killed.responses.create(model="m", input="x", background=True)
        poll(killed, resp.id, lambda r: r.status == "in_progress")
        os.kill(process.pid, signal.SIGKILL)
        process.wait(10)
    finally:
        if process.poll() is None:
            process.kill()
    patient = ProxyServer(backend=backend.url, chat_template=str(QWEN3_TEMPLATE), state_dir=str(tmp_path),
                          background_stale_seconds=60).start()
    try:  # a heartbeat younger than --background-stale-seconds: still in progress
        assert client_for(patient).responses.retrieve(resp.id).status == "in_progress"
    finally:
        patient.stop()
    restarted = ProxyServer(backend=backend.url, chat_template=str(QWEN3_TEMPLATE), state_dir=str(tmp_path),
                            background_stale_seconds=2).start()
    try:  # once older: declared failed, by whichever server is asked
        client = client_for(restarted)
        failed = poll(client, resp.id, lambda r: r.status not in UNFINISHED, timeout=10)
        assert failed.status == "failed" and "stopped" in failed.error.message  # type: ignore[union-attr]
        events = events_of(resume(restarted, resp.id))
        assert [e["type"] for e in events[-2:]] == ["error", "response.failed"]
        assert [e["sequence_number"] for e in events] == list(range(len(events)))
    finally:
        restarted.stop()


@pytest.fixture(scope="module")
def redis() -> Iterator[RedisServer]:
    server = RedisServer()
    yield server
    server.stop()


def test_two_replicas_poll_resume_and_cancel_each_others_responses(redis: RedisServer, backend_factory,
                                                                    proxy_factory) -> None:
    backend = backend_factory("vllm", model="Qwen/Qwen3-8B")
    one, two = (proxy_factory(backend=backend.url, chat_template=str(QWEN3_TEMPLATE), reasoning_parser="qwen3",
                              response_store=redis.url, thinking_secret="s") for _ in range(2))
    on_one, on_two = client_for(one), client_for(two)
    # generated on one, polled and resumed on two
    under_way = Gate()  # generation stays under way until two has seen it so
    backend.script(Script(pieces=PIECES, hold=under_way, hold_after=2))
    resp = on_one.responses.create(model="m", input="x", background=True)
    assert poll(on_two, resp.id, lambda r: r.status == "in_progress").id == resp.id
    under_way.open()
    followed = events_of(resume(two, resp.id, 1))
    assert followed[0]["type"] == "response.in_progress" and followed[-1]["type"] == "response.completed"
    assert on_two.responses.retrieve(resp.id).output_text == "Once upon a time."
    assert events_of(resume(one, resp.id, 1)) == followed
    # generated on one, cancelled on two: one stops at its next write, its backend request closed
    backend.script(slow())
    long = on_one.responses.create(model="m", input="x", background=True)
    poll(on_two, long.id, lambda r: r.status == "in_progress")
    wait_for(lambda: bool(backend.seen) and backend.seen[-1].closed is None)
    assert on_two.responses.cancel(long.id).status == "cancelled"
    wait_for(lambda: backend.seen[-1].closed is not None, timeout=10)  # held for good: only the cancel closes it
    assert poll(on_one, long.id, lambda r: r.status == "cancelled" and r.output).output_text.startswith("word ")
    wait_for(lambda: one.runtime.services.detached.used == 0)


def test_a_store_that_is_down_refuses_a_background_response(backend_factory, proxy_factory) -> None:
    down = RedisServer()
    backend = backend_factory("vllm", model="Qwen/Qwen3-8B")
    server = proxy_factory(backend=backend.url, chat_template=str(QWEN3_TEMPLATE), response_store=down.url,
                           thinking_secret="s")
    down.stop()
    refused = httpx.post(server.url + "/v1/responses", timeout=30,
                         json={"model": "m", "input": "x", "background": True})
    assert refused.status_code == 503 and refused.json()["error"]["code"] == "store_unavailable"
    assert not backend.bodies()  # nothing was generated for a response nobody could read
    assert server.runtime.services.detached.used == 0


def test_a_store_outage_while_generating_never_reports_a_false_completion(backend_factory, proxy_factory,
                                                                         tmp_path: Path) -> None:
    redis = RedisServer(persist=tmp_path)
    port = redis.port
    backend = backend_factory("vllm", model="Qwen/Qwen3-8B")
    server = proxy_factory(backend=backend.url, chat_template=str(QWEN3_TEMPLATE), response_store=redis.url,
                           thinking_secret="s", background_stale_seconds=2)
    client = client_for(server)
    try:
        # a short outage: the events wait in memory, and the response completes with every one of them
        outage = Gate()  # the rest of the answer is made while the store is down
        backend.script(Script(pieces=[f"p{i} " for i in range(30)], hold=outage, hold_after=1))
        resp = client.responses.create(model="m", input="x", background=True)
        poll(client, resp.id, lambda r: r.status == "in_progress")
        redis.stop()
        outage.open()
        wait_for(lambda: backend.seen[-1].finished is not None)  # the whole answer made, the store still down
        redis = RedisServer(port=port, persist=tmp_path)
        done = poll(client, resp.id, lambda r: r.status not in UNFINISHED)
        assert done.status == "completed" and done.output_text == "".join(f"p{i} " for i in range(30))
        events = events_of(resume(server, resp.id))
        assert [e["sequence_number"] for e in events] == list(range(len(events)))
        assert "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta") == done.output_text
        # an outage longer than the staleness bound: the ending is never stored, and once the store is
        # back the response is reported failed, never completed
        outage = Gate()
        backend.script(Script(pieces=[f"q{i} " for i in range(10)], hold=outage, hold_after=1))
        with httpx.stream("POST", server.url + "/v1/responses", timeout=60,
                          json={"model": "m", "input": "x", "background": True, "stream": True}) as live:
            lines = live.iter_lines()
            response_id = json.loads(next(ln for ln in lines if ln.startswith("data: "))[6:])["response"]["id"]
            next(ln for ln in lines if "output_text.delta" in ln)
            redis.stop()
            outage.open()
            rest = [json.loads(ln[6:]) for ln in lines if ln.startswith("data: ")]
        assert rest[-1]["type"] == "error" and rest[-1]["code"] == "store_unavailable"  # not response.completed
        assert "".join(e.get("delta", "") for e in rest if e["type"] == "response.output_text.delta")
        redis = RedisServer(port=port, persist=tmp_path)
        failed = poll(client, response_id, lambda r: r.status not in UNFINISHED)
        assert failed.status == "failed" and failed.output == []
        events = events_of(resume(server, response_id))
        assert [e["type"] for e in events[-2:]] == ["error", "response.failed"]
    finally:
        redis.stop()


def test_a_background_response_seen_completed_has_its_items_in_its_conversation(backend_factory, proxy_factory,
                                                                                monkeypatch) -> None:
    """The conversation gets the response's items before the run is stored completed: while adding
    them is held (by the test), a poll sees the response unfinished; once let go, a poll that sees
    it completed lists them (a client polling, then listing, never finds them missing)."""
    backend = backend_factory("vllm", model="Qwen/Qwen3-8B")
    server = proxy_factory(backend=backend.url, chat_template=str(QWEN3_TEMPLATE))
    client = client_for(server)
    conversation = client.conversations.create(items=[{"role": "user", "content": "My name is Ada."}])
    store = server.runtime.services.stores.conversations
    entered, release = threading.Event(), threading.Event()
    add_items = store.add_items

    async def held(*args: Any, **kwargs: Any) -> Any:
        entered.set()
        await asyncio.to_thread(release.wait, 30)
        return await add_items(*args, **kwargs)

    monkeypatch.setattr(store, "add_items", held)
    backend.script(Script(pieces=["Hello ", "Ada."]))
    resp = client.responses.create(model="m", input="Greet me.", conversation=conversation.id, background=True)
    assert entered.wait(30)
    assert client.responses.retrieve(resp.id).status in UNFINISHED  # not completed while its items are not in
    release.set()
    done = poll(client, resp.id, lambda r: r.status not in UNFINISHED)
    assert done.status == "completed"
    items = client.conversations.items.list(conversation.id, order="asc").data
    assert [getattr(item, "role", None) for item in items] == ["user", "user", "assistant"]


@pytest.mark.parametrize("store", ["sqlite", "redis"])
def test_a_background_response_joins_its_conversation_and_the_item_index(store: str, request: pytest.FixtureRequest,
                                                                         backend_factory, proxy_factory) -> None:
    backend = backend_factory("vllm", model="Qwen/Qwen3-8B")
    shared = {"response_store": request.getfixturevalue("redis").url, "thinking_secret": "s"} if store == "redis" else {}
    server = proxy_factory(backend=backend.url, chat_template=str(QWEN3_TEMPLATE), **shared)
    client = client_for(server)
    conversation = client.conversations.create(items=[{"role": "user", "content": "My name is Ada."}])
    backend.script(Script(pieces=["Hello ", "Ada."], delay=0.05))
    resp = client.responses.create(model="m", input="Greet me.", conversation=conversation.id, background=True)
    done = poll(client, resp.id, lambda r: r.status not in UNFINISHED)
    assert done.status == "completed" and done.output_text == "Hello Ada."
    assert "My name is Ada." in backend.bodies()[-1]["prompt"]
    items = client.conversations.items.list(conversation.id, order="asc").data
    assert [getattr(item, "role", None) for item in items] == ["user", "user", "assistant"]
    answer = done.output[-1]
    backend.script(Script(pieces=["Quoted."]))
    client.responses.create(model="m", input=[{"type": "item_reference", "id": answer.id},  # type: ignore[list-item]
                                              {"role": "user", "content": "Again?"}])
    assert "Hello Ada." in backend.bodies()[-1]["prompt"]  # found through the item index
