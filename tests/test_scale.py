"""The scale tier (``pytest -m scale``; part of ``make test``, not of ``make test-fast``): three real
``toolwire serve --workers 2`` processes sharing one Redis and one ``--thinking-secret``, behind Caddy
running ``deploy/compose/Caddyfile`` (round-robin, active health checks), in front of the scripted
backend. Which replica served a request is read from the header the balancer adds
(``X-Toolwire-Replica``), so each claim about crossing replicas is checked, not assumed.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socketserver
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import anthropic
import httpx
import openai
import pytest

from tests.conftest import QWEN3_TEMPLATE
from tests.redis_server import RedisServer
from tests.scale_cluster import REPLICA_HEADER, Caddy, Replica, wait_for
from tests.scripted_backend import Script, ScriptedBackend

pytestmark = pytest.mark.scale

SECRET = "scale-tier-shared-thinking-secret"
API_KEY = "sk-scale-tier"
AUTH = {"Authorization": f"Bearer {API_KEY}"}
DRAIN_SECONDS = 2
TOOLS: list[dict[str, Any]] = [
    {"type": "function", "name": "get_weather", "description": "Weather for a city",
     "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}},
]
CHAT_TOOLS: list[Any] = [{"type": "function", "function": {k: v for k, v in TOOLS[0].items() if k != "type"}}]
WEATHER_TOOL: Any = {"name": "get_weather", "description": "Weather for a city",
                     "input_schema": TOOLS[0]["parameters"]}


def think_and_call(thought: str, city: str) -> Script:
    """Qwen3 output: a reasoning block, then one ``get_weather`` call (qwen25's ``<tool_call>``)."""
    return Script(pieces=["<think>", f"\n{thought}\n", "</think>", "\n\n", "<tool_call>",
                          f'\n{{"name": "get_weather", "arguments": {{"city": "{city}"}}}}\n', "</tool_call>"])


def numbered_answer(body: dict[str, Any]) -> Script:
    """Requests that say ``request-N`` get their own text (cross-talk would show), 20 pieces 50 ms
    apart, so a stream is in flight for about a second; ``quick-N`` gets ``done-N`` at once."""
    prompt = body.get("prompt", "")
    if found := re.search(r"request-(\d+)", prompt):
        return Script(pieces=expected_text(int(found.group(1))), delay=0.05)
    found = re.search(r"quick-(\d+)", prompt)
    return Script(pieces=[f"done-{found.group(1) if found else 'x'}"])


def expected_text(i: int) -> list[str]:
    return [f"answer-{i}-{k} " for k in range(20)]


def replica_args(redis_url: str, backend_url: str, secret: str | None = SECRET, workers: int = 2) -> list[str]:
    """The flags every replica shares: one store, one thinking secret, one API key."""
    args = ["--workers", str(workers), "--backend", backend_url, "--response-store", redis_url, "--api-key", API_KEY,
            "--chat-template", str(QWEN3_TEMPLATE), "--reasoning-parser", "qwen3", "--tool-call-parser", "qwen25",
            "--retries", "0", "--shutdown-grace", "3", "--log-level", "warning"]
    return args + (["--thinking-secret", secret] if secret else [])


@dataclass
class Cluster:
    redis: RedisServer
    backend: ScriptedBackend
    replicas: list[Replica]
    caddy: Caddy
    health_uri: str

    @property
    def url(self) -> str:
        return self.caddy.url

    def replica(self, address: str) -> Replica:
        return next(r for r in self.replicas if r.address == address)

    def served_by(self) -> set[str]:
        """Which replicas the balancer sends new requests to now (12 requests' worth of round-robin)."""
        return {httpx.get(self.url + "/v1/models", headers=AUTH, timeout=5).headers.get(REPLICA_HEADER, "?")
                for _ in range(12)}

    def alive(self) -> list[Replica]:
        return [r for r in self.replicas if r.alive()]

    def ensure_up(self) -> None:
        """Every replica running and back in the balancer's rotation (after a test took one down)."""
        for replica in self.replicas:
            if not replica.alive():
                replica.restart()
        for replica in self.replicas:
            replica.wait_healthy()
        everyone = {r.address for r in self.replicas}
        wait_for(lambda: self.served_by() == everyone, 20, "the balancer did not route to every replica")


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    redis = RedisServer()
    backend = ScriptedBackend("vllm", model="Qwen/Qwen3-8B").start()
    backend.responder = numbered_answer
    replicas = [Replica(replica_args(redis.url, backend.url), env={"TOOLWIRE_DRAIN_SECONDS": str(DRAIN_SECONDS)})
                for _ in range(3)]
    caddy, made = None, None
    try:
        for replica in replicas:
            replica.start()
        for replica in replicas:
            replica.wait_healthy()
        caddy = Caddy([r.address for r in replicas], "/readyz")
        made = Cluster(redis, backend, replicas, caddy, "/readyz")
        made.ensure_up()
        yield made
    finally:
        if caddy is not None:
            caddy.stop()
        for replica in replicas:
            replica.stop()
        backend.stop()
        (made.redis if made is not None else redis).stop()  # the Redis tests restart it


class Served:
    """HTTP clients for the SDKs that note which replica answered each request they send."""

    def __init__(self) -> None:
        self.replicas: list[str] = []

    def _note(self, response: Any) -> None:
        self.replicas.append(response.headers.get(REPLICA_HEADER, "?"))

    def openai(self, cluster: Cluster) -> openai.OpenAI:
        http = httpx.Client(timeout=30, event_hooks={"response": [self._note]})
        return openai.OpenAI(base_url=cluster.url + "/v1", api_key=API_KEY, max_retries=0, http_client=http)

    def anthropic(self, cluster: Cluster) -> anthropic.Anthropic:
        # anthropic 2.x speaks through httpx2 (the same API), older releases through httpx
        http = vars(anthropic._base_client).get("httpx2", httpx)
        client = http.Client(timeout=30, event_hooks={"response": [self._note]})
        return anthropic.Anthropic(base_url=cluster.url, api_key=API_KEY, max_retries=0, http_client=client)


def assert_each_turn_elsewhere(replicas: list[str], cluster: Cluster) -> None:
    assert len(replicas) == 3 and set(replicas) == {r.address for r in cluster.replicas}, replicas


# ----------------------------------------------------------------------------- agent loops


def test_responses_loop_crosses_replicas_with_chain_and_sealed_reasoning(cluster: Cluster) -> None:
    """Turn 1 seals its reasoning on one replica; turn 2 continues by ``previous_response_id`` on
    another (the chain comes from Redis); turn 3, on the third, sends the whole history back
    statelessly with both sealed reasoning items — they verify there because the secret is shared."""
    served = Served()
    client = served.openai(cluster)
    backend = cluster.backend
    backend.script(think_and_call("Sealed plan: look up Lyon first.", "Lyon"))
    first = client.responses.create(model="m", input="Weather in Lyon, then Nice?", tools=TOOLS,
                                    include=["reasoning.encrypted_content"])
    reasoning1, call1 = first.output
    assert reasoning1.type == "reasoning" and reasoning1.encrypted_content
    assert "Sealed plan" not in reasoning1.encrypted_content and call1.type == "function_call"
    backend.script(think_and_call("Lyon is done; now Nice.", "Nice"))
    second = client.responses.create(
        model="m", previous_response_id=first.id, tools=TOOLS, include=["reasoning.encrypted_content"],
        input=[{"type": "function_call_output", "call_id": call1.call_id, "output": "LYON-SUNNY"}])
    prompt = backend.bodies()[-1]["prompt"]
    assert "Weather in Lyon, then Nice?" in prompt and "Sealed plan: look up Lyon first." in prompt
    assert "LYON-SUNNY" in prompt
    reasoning2, call2 = second.output
    assert reasoning2.type == "reasoning" and call2.type == "function_call"
    history: list[Any] = [{"role": "user", "content": "Weather in Lyon, then Nice?"}]
    for reasoning, call, output in ((reasoning1, call1, "LYON-SUNNY"), (reasoning2, call2, "NICE-RAIN")):
        history.append({"type": "reasoning", "id": reasoning.id, "summary": [],
                        "encrypted_content": reasoning.encrypted_content})
        history.append({"type": "function_call", "call_id": call.call_id, "name": call.name,
                        "arguments": call.arguments})
        history.append({"type": "function_call_output", "call_id": call.call_id, "output": output})
    backend.script(Script(pieces=["Lyon is sunny, Nice is rainy."]))
    third = client.responses.create(model="m", input=history, tools=TOOLS, store=False)
    assert third.output_text == "Lyon is sunny, Nice is rainy."
    prompt = backend.bodies()[-1]["prompt"]
    assert "Sealed plan: look up Lyon first." in prompt and "Lyon is done; now Nice." in prompt
    assert_each_turn_elsewhere(served.replicas, cluster)
    # the stored turns are readable through any replica
    assert client.responses.retrieve(second.id).output[1].call_id == call2.call_id


def test_messages_loop_crosses_replicas_with_thinking_signatures(cluster: Cluster) -> None:
    """Thinking blocks signed on one replica are handed back to the next and verify there (their
    text reaches the prompt; a block that did not verify would be dropped)."""
    served = Served()
    client = served.anthropic(cluster)
    backend = cluster.backend
    messages: list[Any] = [{"role": "user", "content": "Weather in Lyon, then Nice?"}]
    turns = [think_and_call("Signed plan: Lyon first.", "Lyon"), think_and_call("Lyon done, Nice next.", "Nice"),
             Script(pieces=["Lyon is sunny, Nice is rainy."])]
    results = ["LYON-SUNNY", "NICE-RAIN"]
    for turn, script in enumerate(turns):
        backend.script(script)
        message = client.messages.create(model="m", max_tokens=200, messages=messages, tools=[WEATHER_TOOL],
                                         thinking={"type": "enabled", "budget_tokens": 100})
        prompt = backend.bodies()[-1]["prompt"]
        if turn >= 1:
            assert "Signed plan: Lyon first." in prompt and "LYON-SUNNY" in prompt
        if turn == 2:
            assert "Lyon done, Nice next." in prompt and "NICE-RAIN" in prompt
            assert message.content[-1].type == "text" and message.content[-1].text == "Lyon is sunny, Nice is rainy."
            break
        thinking, call = message.content
        assert thinking.type == "thinking" and thinking.signature and call.type == "tool_use"
        messages.append({"role": "assistant", "content": [block.model_dump(exclude_none=True)
                                                          for block in message.content]})
        messages.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id,
                                                      "content": results[turn]}]})
    assert_each_turn_elsewhere(served.replicas, cluster)


def test_chat_loop_with_tool_calls_crosses_replicas(cluster: Cluster) -> None:
    served = Served()
    client = served.openai(cluster)
    backend = cluster.backend
    messages: list[Any] = [{"role": "user", "content": "Weather in Lyon, then Nice?"}]
    for turn, script in enumerate([think_and_call("Lyon first.", "Lyon"), think_and_call("Nice next.", "Nice"),
                                   Script(pieces=["Lyon is sunny, Nice is rainy."])]):
        backend.script(script)
        completion = client.chat.completions.create(model="m", messages=messages, tools=CHAT_TOOLS)
        message = completion.choices[0].message
        if turn == 2:
            assert message.content == "Lyon is sunny, Nice is rainy." and not message.tool_calls
            prompt = backend.bodies()[-1]["prompt"]
            assert "LYON-RESULT-0" in prompt and "NICE-RESULT-1" in prompt
            break
        assert completion.choices[0].finish_reason == "tool_calls" and message.tool_calls
        call = message.tool_calls[0]
        assert json.loads(call.function.arguments) == {"city": ["Lyon", "Nice"][turn]}
        messages.append(message.model_dump(exclude_none=True))
        messages.append({"role": "tool", "tool_call_id": call.id, "content": f"{['LYON', 'NICE'][turn]}-RESULT-{turn}"})
    assert_each_turn_elsewhere(served.replicas, cluster)


# ----------------------------------------------------------------------------- the shared secret


def _sealed_on(url: str) -> tuple[list[Any], Any]:
    """A stateless turn made on ``url``: the history to hand back, with its sealed reasoning."""
    client = openai.OpenAI(base_url=url + "/v1", api_key=API_KEY, max_retries=0, timeout=30)
    first = client.responses.create(model="m", input="Weather in Oslo?", tools=TOOLS, store=False,
                                    include=["reasoning.encrypted_content"])
    reasoning, call = first.output
    return [{"role": "user", "content": "Weather in Oslo?"},
            {"type": "reasoning", "id": reasoning.id, "summary": [], "encrypted_content": reasoning.encrypted_content},
            {"type": "function_call", "call_id": call.call_id, "name": call.name, "arguments": call.arguments},
            {"type": "function_call_output", "call_id": call.call_id, "output": "OSLO-SNOW"}], client


def test_a_replica_without_the_shared_secret_seals_what_no_other_replica_opens(cluster: Cluster) -> None:
    """Why the secret must be shared: reasoning sealed by a replica on the same Redis but without
    ``--thinking-secret`` is dropped by every other replica (the control: the cluster's own seals
    verify across replicas, tested above)."""
    lone = Replica(replica_args(cluster.redis.url, cluster.backend.url, secret=None, workers=1)).start()
    try:
        lone.wait_healthy()
        cluster.backend.script(think_and_call("Lone plan: Oslo.", "Oslo"))
        history, _ = _sealed_on(lone.url)
        for _ in range(3):  # whichever replica the balancer picks
            cluster.backend.script(Script(pieces=["Snowy."]))
            httpx.post(cluster.url + "/v1/responses", headers=AUTH, timeout=30, json={
                "model": "m", "input": history, "tools": TOOLS, "store": False}).raise_for_status()
            prompt = cluster.backend.bodies()[-1]["prompt"]
            assert "OSLO-SNOW" in prompt and "Lone plan" not in prompt
    finally:
        lone.stop()


def test_a_replica_on_redis_without_a_secret_warns_loudly(cluster: Cluster) -> None:
    lone = Replica(replica_args(cluster.redis.url, cluster.backend.url, secret=None, workers=1)).start()
    try:
        lone.wait_healthy()
        assert "thinking-secret" in lone.output()
    finally:
        lone.stop()
    shared = Replica(replica_args(cluster.redis.url, cluster.backend.url, workers=1)).start()
    try:
        shared.wait_healthy()
        assert "thinking-secret" not in shared.output()  # the warning is for the missing secret only
    finally:
        shared.stop()


# ----------------------------------------------------------------------------- readiness and drain


def test_liveness_and_readiness_answers(cluster: Cluster) -> None:
    replica = cluster.replicas[0]
    live = httpx.get(replica.url + "/livez", timeout=5)
    assert (live.status_code, live.json()) == (200, {"status": "ok"})
    ready = httpx.get(replica.url + "/readyz", timeout=5)
    assert (ready.status_code, ready.json()) == (200, {"status": "ready", "backend": "ok", "store": "ok"})
    assert httpx.get(replica.url + "/health", timeout=5).json()["store"] == "ok"
    cluster.backend.healthy = False
    try:
        down = httpx.get(replica.url + "/readyz", timeout=5)
        assert down.status_code == 503 and down.json()["status"] == "unavailable"
        assert httpx.get(replica.url + "/livez", timeout=5).status_code == 200  # alive all the same
        assert httpx.get(replica.url + "/health", timeout=5).status_code == 503
    finally:
        cluster.backend.healthy = True


def test_sigterm_drains_a_replica_out_of_the_balancer(cluster: Cluster) -> None:
    """SIGTERM: /readyz says draining at once, the stream in flight completes, the balancer stops
    sending new requests there while they keep succeeding, and the process exits after the drain."""
    cluster.ensure_up()
    victim = cluster.replicas[2]
    survivors = {r.address for r in cluster.replicas if r is not victim}
    with httpx.Client(timeout=30) as client, client.stream(
            "POST", victim.url + "/v1/responses", headers=AUTH,
            json={"model": "m", "input": "request-7", "stream": True}) as in_flight:
        lines = in_flight.iter_lines()
        assert next(line for line in lines if line.startswith("data: "))  # the stream has begun
        victim.terminate()
        # every worker of the replica says so (each learns it from the signal; on a loaded machine
        # that takes a moment): several answers in a row, whichever worker gives them
        deadline, in_a_row = time.monotonic() + 5, 0
        while in_a_row < 4:
            assert time.monotonic() < deadline, "the replica did not say it drains"
            draining = httpx.get(victim.url + "/readyz", timeout=5)
            said = draining.status_code == 503 and draining.json()["status"] == "draining"
            in_a_row = in_a_row + 1 if said else 0
            time.sleep(0.02)
        # out of the rotation once the balancer's probes have seen it (whatever the machine's load)
        wait_for(lambda: cluster.served_by() == survivors, 30, "the balancer kept sending to the draining replica")
        during = [httpx.post(cluster.url + "/v1/chat/completions", headers=AUTH, timeout=30, json={
            "model": "m", "messages": [{"role": "user", "content": "quick-3"}]}) for _ in range(6)]
        assert all(r.status_code == 200 for r in during)
        assert {r.headers.get(REPLICA_HEADER) for r in during} == survivors
        rest = "\n".join(lines)
        assert '"type":"response.completed"' in rest.replace(" ", "")
    assert victim.process is not None
    victim.process.wait(DRAIN_SECONDS + 10)


# ----------------------------------------------------------------------------- a replica lost


@dataclass
class Stream:
    """What one client saw of one streamed, stored Responses request."""

    i: int
    status: int | None = None
    replica: str | None = None
    response_id: str | None = None
    text: list[str] = field(default_factory=list)
    completed: bool = False  # saw response.completed
    error: str | None = None  # what told the client it failed
    hung: bool = False
    finished_at: float = 0.0


async def _stream(client: httpx.AsyncClient, url: str, stream: Stream, started: dict[str, set[int]],
                  timeout: float) -> None:
    body = {"model": "m", "input": f"request-{stream.i}", "stream": True, "store": True}
    try:
        async with asyncio.timeout(timeout):
            async with client.stream("POST", url + "/v1/responses", json=body, headers=AUTH) as response:
                stream.status = response.status_code
                stream.replica = response.headers.get(REPLICA_HEADER)
                started.setdefault(stream.replica or "?", set()).add(stream.i)
                async for line in response.aiter_lines():
                    if not line.startswith("data: "):
                        continue
                    event = json.loads(line[6:])
                    kind = event.get("type")
                    if kind == "response.created":
                        stream.response_id = event["response"]["id"]
                    elif kind == "response.output_text.delta":
                        stream.text.append(event["delta"])
                    elif kind == "response.completed":
                        stream.completed = True
                        stream.text = [event["response"]["output"][0]["content"][0]["text"]]
                    elif kind in ("error", "response.failed"):
                        stream.error = kind
    except TimeoutError:
        stream.hung = True
    except httpx.HTTPError as exc:  # the connection broke: the client sees an exception
        stream.error = type(exc).__name__
    if not stream.completed and stream.error is None and not stream.hung:
        stream.error = "ended without response.completed"  # a clean end, but the client can tell
    stream.finished_at = time.monotonic()


class Tombstone(socketserver.ThreadingTCPServer):
    """Listens on a dead replica's port and notes each request line the balancer sends there."""

    allow_reuse_address = True
    daemon_threads = True

    def __init__(self, port: int) -> None:
        self.lines: list[str] = []
        tomb = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                tomb.lines.append(self.rfile.readline().decode("latin-1").strip())
                self.wfile.write(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")

        super().__init__(("127.0.0.1", port), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()


def test_sigkill_one_replica_under_300_concurrent_streams(cluster: Cluster) -> None:
    """No acknowledged stored response lost; streams elsewhere complete; streams on the killed
    replica end with an error the client sees (none hangs, none is cut silently); the balancer
    stops sending to the dead replica and new requests succeed on the other two."""
    cluster.ensure_up()
    count, victim = 300, cluster.replicas[1]
    streams = [Stream(i) for i in range(count)]
    started: dict[str, set[int]] = {}
    killed_at: list[float] = []

    async def scenario() -> None:
        limits = httpx.Limits(max_connections=count + 20, max_keepalive_connections=count + 20)
        async with httpx.AsyncClient(timeout=httpx.Timeout(30, connect=10), limits=limits) as client:
            tasks = [asyncio.create_task(_stream(client, cluster.url, s, started, 90)) for s in streams]

            def in_flight_on_victim() -> int:
                return sum(1 for i in started.get(victim.address, ()) if not streams[i].finished_at)
            deadline = time.monotonic() + 60
            while in_flight_on_victim() < 20 and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            victim.kill()
            killed_at.append(time.monotonic())
            await asyncio.gather(*tasks)

    asyncio.run(scenario())
    assert killed_at, "the replica was not killed"
    hung = [s.i for s in streams if s.hung]
    assert hung == [], f"{len(hung)} streams hung"
    for s in streams:  # a completed stream carries its whole text: nothing is cut behind a completed event
        if s.completed:
            assert "".join(s.text) == "".join(expected_text(s.i)), s
    survivors = {r.address for r in cluster.replicas if r is not victim}
    elsewhere = [s for s in streams if s.replica in survivors]
    assert elsewhere and all(s.completed for s in elsewhere), [s for s in elsewhere if not s.completed][:3]
    on_victim = [s for s in streams if s.replica == victim.address]
    cut = [s for s in on_victim if not s.completed]
    assert cut, "no stream was in flight on the killed replica"
    assert all(s.error for s in cut)  # each one told its client: an exception, an error event, or no completion
    unrouted = [s for s in streams if s.replica not in survivors | {victim.address}]
    assert all(s.error and s.finished_at >= killed_at[0] for s in unrouted), unrouted[:3]
    assert len(elsewhere) + len(on_victim) + len(unrouted) == count

    # every response whose completion a client saw is in the shared store, read through any replica
    acknowledged = [s for s in streams if s.completed]

    async def retrieve_all() -> list[tuple[int, str]]:
        async with httpx.AsyncClient(timeout=30) as client:
            gate = asyncio.Semaphore(32)

            async def one(s: Stream) -> tuple[int, str]:
                async with gate:
                    response = await client.get(f"{cluster.url}/v1/responses/{s.response_id}", headers=AUTH)
                if response.status_code != 200:
                    return response.status_code, ""
                return 200, response.json()["output"][0]["content"][0]["text"]
            return await asyncio.gather(*(one(s) for s in acknowledged))
    found = asyncio.run(retrieve_all())
    lost = [s.i for s, (status, text) in zip(acknowledged, found, strict=True)
            if status != 200 or text != "".join(expected_text(s.i))]
    statuses = sorted({status for status, _ in found})
    assert lost == [], f"{len(lost)} acknowledged responses not read back (statuses seen: {statuses})"

    # the balancer's probes take the dead replica out: a listener on its port gets probes (each a 503,
    # so it stays out), no requests
    tomb = Tombstone(victim.port)
    try:
        wait_for(lambda: any(line.startswith(f"GET {cluster.health_uri}") for line in tomb.lines), 30,
                 "the balancer did not probe the dead replica's port")
        after: list[str] = []
        for i in range(30):
            response = httpx.post(cluster.url + "/v1/chat/completions", headers=AUTH, timeout=30, json={
                "model": "m", "messages": [{"role": "user", "content": f"request-{1000 + i}"}]})
            assert response.status_code == 200, response.text
            assert response.json()["choices"][0]["message"]["content"] == "".join(expected_text(1000 + i))
            after.append(response.headers.get(REPLICA_HEADER, "?"))
        assert set(after) == survivors
        assert not [line for line in tomb.lines if not line.startswith("GET ")], tomb.lines
        assert any(line.startswith(f"GET {cluster.health_uri}") for line in tomb.lines), tomb.lines
    finally:
        tomb.shutdown()
        tomb.server_close()
    print(f"\nSIGKILL under {count} streams: {len(acknowledged)} completed (all retrievable), "
          f"{len(cut)} cut on the killed replica (all seen as errors: "
          f"{sorted({s.error or '' for s in cut})}), {len(unrouted)} refused at the balancer, 0 hung")


# ----------------------------------------------------------------------------- Redis hung


def store_reported(replica: Replica, state: str) -> None:
    """Wait until ``/readyz`` of ``replica`` reports the store ``state`` four times in a row (each
    worker checks the store on its own; the answers come from whichever worker takes them)."""
    seen: list[str] = []

    def reported() -> bool:
        seen.append(httpx.get(replica.url + "/readyz", timeout=5).json()["store"])
        return seen[-4:] == [state] * 4
    wait_for(reported, 30, f"{replica.address} did not report the store {state}")


def test_a_hung_redis_keeps_every_replica_in_the_balancer(cluster: Cluster) -> None:
    """Redis stopped rather than gone (SIGSTOP: a stuck Redis or a partition looks the same). The
    readiness answers never wait on it (each within a Kubernetes probe's 1 s), so the balancer —
    probing with the compose Caddyfile's 2 s timeout — keeps all three replicas and chat goes on
    through it; once each replica's store breaker has opened, a request that needs the store is a
    503 at once (within 1 s, where ``--store-timeout`` is 2 s); after SIGCONT what was stored is
    read back through any replica."""
    cluster.ensure_up()
    everyone = {r.address for r in cluster.replicas}
    client = httpx.Client(timeout=30, headers=AUTH)
    kept = client.post(cluster.url + "/v1/responses", json={"model": "m", "input": "quick-1"})
    assert kept.status_code == 200
    stored = f"{cluster.url}/v1/responses/{kept.json()['id']}"
    os.kill(cluster.redis.process.pid, signal.SIGSTOP)
    try:
        for replica in cluster.replicas:
            for _ in range(4):  # whichever worker answers
                ready = httpx.get(replica.url + "/readyz", timeout=1)
                assert ready.status_code == 200 and ready.json()["status"] == "ready"
        for replica in cluster.replicas:
            store_reported(replica, "unavailable")  # their checks have seen the hang, many probes ago
        assert cluster.served_by() == everyone
        chats = [client.post(cluster.url + "/v1/chat/completions", json={
            "model": "m", "messages": [{"role": "user", "content": f"quick-{i}"}]}) for i in range(6)]
        assert [c.status_code for c in chats] == [200] * 6
        assert {c.headers.get(REPLICA_HEADER) for c in chats} == everyone

        def all_refused_at_once() -> bool:  # every worker's breaker is open: twelve 503s in a row
            return all(httpx.get(stored, headers=AUTH, timeout=1).status_code == 503 for _ in range(12))
        wait_for(all_refused_at_once, 60, "the replicas' store breakers did not open")
        for _ in range(12):
            refused = httpx.get(stored, headers=AUTH, timeout=1)
            assert refused.status_code == 503 and refused.json()["error"]["code"] == "store_unavailable"
    finally:
        os.kill(cluster.redis.process.pid, signal.SIGCONT)
    for replica in cluster.replicas:
        store_reported(replica, "ok")
    wait_for(lambda: all(client.get(stored).status_code == 200 for _ in range(12)), 30,
             "the stored response was not read back")


# ----------------------------------------------------------------------------- Redis restarted (on the survivors)


def _restart_redis(cluster: Cluster) -> None:
    cluster.redis = RedisServer(port=cluster.redis.port)


def test_redis_outage_spares_chat_and_unstored_responses(cluster: Cluster) -> None:
    """Chat completions and ``store: false`` responses never touch the store: they go on while Redis
    is down and while it restarts."""
    cluster.redis.stop()
    try:
        for i in range(3):
            chat = httpx.post(cluster.url + "/v1/chat/completions", headers=AUTH, timeout=30, json={
                "model": "m", "messages": [{"role": "user", "content": f"quick-{i}"}]})
            assert chat.status_code == 200, chat.text
            unstored = httpx.post(cluster.url + "/v1/responses", headers=AUTH, timeout=30, json={
                "model": "m", "input": f"quick-{i}", "store": False})
            assert unstored.status_code == 200, unstored.text
            assert unstored.json()["output"][0]["content"][0]["text"] == f"done-{i}"
    finally:
        _restart_redis(cluster)


def test_redis_restart_mid_run_is_503_then_recovers_by_itself(cluster: Cluster) -> None:
    client = httpx.Client(timeout=30, headers=AUTH)
    kept = client.post(cluster.url + "/v1/responses", json={"model": "m", "input": "request-1"})
    assert kept.status_code == 200
    chats: list[int] = []
    stop = threading.Event()

    def chat_all_along() -> None:  # chat traffic across the whole outage and restart
        with httpx.Client(timeout=30, headers=AUTH) as chat_client:
            while not stop.is_set():
                chats.append(chat_client.post(cluster.url + "/v1/chat/completions", json={
                    "model": "m", "messages": [{"role": "user", "content": "request-2"}]}).status_code)
    runner = threading.Thread(target=chat_all_along)
    runner.start()
    try:
        cluster.redis.stop()
        try:
            for _ in range(3):  # every replica answers the same way
                missing = client.get(f"{cluster.url}/v1/responses/{kept.json()['id']}")
                assert missing.status_code == 503 and missing.json()["error"]["code"] == "store_unavailable"
                assert missing.json()["error"]["type"] == "server_error"
                chained = client.post(cluster.url + "/v1/responses", json={
                    "model": "m", "input": "more", "previous_response_id": kept.json()["id"]})
                assert chained.status_code == 503 and chained.json()["error"]["code"] == "store_unavailable"
                unsaved = client.post(cluster.url + "/v1/responses", json={"model": "m", "input": "request-4"})
                assert unsaved.status_code == 200 and "not stored" in unsaved.headers["x-toolwire-warning"]
                streamed = client.post(cluster.url + "/v1/responses", json={"model": "m", "input": "request-5",
                                                                            "stream": True})
                kinds = [json.loads(line[6:])["type"] for line in streamed.text.splitlines()
                         if line.startswith("data: ")]
                assert kinds[-2:] == ["error", "response.failed"]
            for replica in cluster.alive():
                store_reported(replica, "unavailable")  # from the background checks, never waited on
                assert httpx.get(replica.url + "/readyz", timeout=5).status_code == 200
        finally:
            _restart_redis(cluster)
        for i in range(6):  # several per replica: each one's pooled connections went stale and are retried
            saved = client.post(cluster.url + "/v1/responses", json={"model": "m", "input": f"request-{i}"})
            assert saved.status_code == 200 and "x-toolwire-warning" not in saved.headers
            assert client.get(f"{cluster.url}/v1/responses/{saved.json()['id']}").status_code == 200
    finally:
        stop.set()
        runner.join(30)
    assert chats and set(chats) == {200}
