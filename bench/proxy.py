"""Section: proxy overhead — what toolwire adds between a client and a raw-completion backend.

Three processes on loopback: the fast scripted backend (``bench.backend``: vLLM ``/v1/completions``
SSE, one event per token, no delay), toolwire (``bench.proxy_main``: ``create_app(Settings(...))``
under uvicorn, Qwen3 chat template, ``hermes`` tool parser and ``qwen3`` reasoning parser on), and
this process as the client (raw asyncio HTTP/1.1, keep-alive, one connection per stream).

The completion is fixed: a sentence of content, then one ``<tool_call>`` whose ``content`` argument
is code-like text — every token goes through the reasoning and tool parsers and comes out as
OpenAI ``chat.completion.chunk`` deltas. Every proxied response is checked (``[DONE]``,
``finish_reason: tool_calls``).

* **Added TTFT**: time from sending the request to the first event carrying generated text
  (backend: the first ``text`` event; toolwire: the first ``content`` delta), measured with one
  stream, alternating direct and proxied requests; added = proxied − direct, at p50 and p99.
  A do-nothing byte relay (``bench.relay``) is measured in the same loop: the floor any extra
  Python process on this machine adds, so toolwire's own share (toolwire − relay) can be read off.
* **Where the time to first token goes**: one more toolwire, run with the ``trace`` diagnostic
  (``bench.experiments``), gives the p50 of each milestone on the request's path (validated,
  rendered, backend asked, first backend token, first chunk sent, client has it) — once with the
  fast backend, once with a backend that paces a short sentence like a real model (no burst behind
  the first token), each alternating with direct requests.
* **Sustained tokens/s** with 1, 16 and 64 concurrent streams (closed loop: each stream sends its
  next request when the previous one ends) — through toolwire and, for scale, straight from the
  backend.
* **CPU per 1 000 tokens** of the toolwire process tree (``bench.cpu``), and proxied tokens per
  CPU-second of toolwire ("per core").

Targets are ratios against the do-nothing relay measured in the same run, so they hold on any
machine: added TTFT p50 ≤ 2× the relay's; CPU per separately written token (paced backend: every
token its own SSE event and write) ≤ 2× the relay's; plus ≥ 20 000 proxied tokens/s per core at 64
streams.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench.cases import FAMILIES, TOOLS, code_text, markers_of, render_call, tokenize
from bench.cpu import tree_cpu
from bench.report import Section, at_least, at_most, fmt, median, percentile, table

TITLE = "Proxy overhead (toolwire in front of a scripted vLLM backend)"
ROOT = Path(__file__).resolve().parent.parent
# targets are ratios against a do-nothing relay measured in the same run (machine-independent)
TTFT_RATIO_TARGET = at_most(2.0)  # toolwire's added TTFT p50 ÷ the relay's
CPU_RATIO_TARGET = at_most(2.0)  # toolwire's CPU per separately written token ÷ the relay's (paced backend)
PER_CORE_TARGET = at_least(20_000)  # proxied tokens per CPU-second of toolwire, 64 streams
CONCURRENCY = (1, 16, 64)
ARGUMENT_BYTES = 1536  # the tool call's content argument


def completion_tokens() -> list[str]:
    """The fixed completion, as token texts: content, then one hermes tool call (~4 chars a token)."""
    hermes = next(f for f in FAMILIES if f.name == "hermes")
    args = {"path": "src/render.py", "content": code_text(ARGUMENT_BYTES)}
    text = "I'll write the file for you now.\n\n" + render_call(hermes, args)
    return tokenize(text, markers_of(hermes))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def answers(url: str, seconds: float = 120, expect: bytes = b"") -> bool:
    """Whether ``GET url`` answers 200 (with ``expect`` in its body) within ``seconds``, asked every
    0.2 s until it does."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            response = httpx.get(url, timeout=2)
            if response.status_code == 200 and expect in response.content:
                return True
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    return False


# ---------------------------------------------------------------------- processes


@dataclass
class Proc:
    process: subprocess.Popen[str]
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)


def start_listener(args: list[str], what: str) -> Proc:
    """Start ``python -m <args>`` (a bench helper that prints ``PORT <n>`` once listening)."""
    process = subprocess.Popen([sys.executable, "-m", *args], cwd=str(ROOT), stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line.startswith("PORT "):
        process.kill()
        raise RuntimeError(f"{what} did not start: {line!r}")
    return Proc(process, int(line.split()[1]))


def start_backend(tokens: list[str], workdir: Path, pace_ms: float = 0.0) -> Proc:
    """The scripted backend streaming ``tokens``; ``pace_ms`` spaces them like a model would."""
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / "completion-tokens.json"
    path.write_text(json.dumps(tokens, ensure_ascii=False))
    pace = ["--pace-ms", str(pace_ms)] if pace_ms else []
    return start_listener(["bench.backend", "--tokens", str(path), *pace],
                          "paced backend" if pace_ms else "scripted backend")


def start_relay(backend_port: int) -> Proc:
    return start_listener(["bench.relay", "--to", str(backend_port)], "relay")


def start_proxy(backend_url: str, experiments: tuple[str, ...] = (), profile: Path | None = None) -> Proc:
    port = free_port()
    # BENCH_PROXY_PYTHON: run toolwire under another interpreter (e.g. a scratch venv with uvloop + httptools)
    python = os.environ.get("BENCH_PROXY_PYTHON") or sys.executable
    cmd = [python, "-m", "bench.proxy_main", "--backend", backend_url, "--port", str(port)]
    for name in experiments:
        cmd += ["--experiment", name]
    if profile is not None:
        cmd += ["--profile", str(profile)]
    process = subprocess.Popen(cmd, cwd=str(ROOT), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    proc = Proc(process, port)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"toolwire exited: {process.stderr.read() if process.stderr else ''}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
                sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                if sock.recv(64).startswith(b"HTTP/1.1 200"):
                    return proc
        except OSError:
            pass
        time.sleep(0.1)
    proc.stop()
    raise RuntimeError("toolwire did not become healthy")


# ---------------------------------------------------------------------- the client


def http_post(path: str, port: int, body: dict[str, Any]) -> bytes:
    data = json.dumps(body).encode()
    return (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
            f"Accept: text/event-stream\r\nContent-Length: {len(data)}\r\n\r\n").encode() + data


@dataclass
class Endpoint:
    """One side of the comparison: where to send, what to send, what the first token looks like."""

    name: str
    port: int
    request: bytes
    first_token: tuple[bytes, ...]  # any of these in the stream = the first generated text has arrived
    check: bytes | None  # must appear in the response tail


def direct_target(port: int) -> Endpoint:
    body = {"model": "bench-model", "prompt": "<|im_start|>user\nWrite render.py<|im_end|>\n<|im_start|>assistant\n",
            "stream": True, "max_tokens": 4096}
    return Endpoint("backend", port, http_post("/v1/completions", port, body), (b'"text": "',), None)


def proxy_target(port: int) -> Endpoint:
    body = {"model": "bench-model", "messages": [{"role": "user", "content": "Write render.py"}], "tools": TOOLS,
            "stream": True, "max_tokens": 4096}
    return Endpoint("toolwire", port, http_post("/v1/chat/completions", port, body),
                  (b'"content":"', b'"tool_calls":[', b'"reasoning_content":"'), b'"finish_reason":"tool_calls"')


END = b"0\r\n\r\n"
DONE = b"data: [DONE]"


class Connection:
    def __init__(self, target: Endpoint) -> None:
        self.target = target
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.last_start = 0.0  # perf_counter() when the last request was sent (system-wide monotonic clock)

    async def open(self) -> None:
        self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.target.port, limit=1 << 20)

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            try:
                await self.writer.wait_closed()
            except (ConnectionError, OSError):
                pass

    async def request(self) -> tuple[float, float]:
        """One streamed request; returns (time to first token, total time) in seconds."""
        if self.writer is None:
            await self.open()
        assert self.reader is not None and self.writer is not None
        t = self.target
        clock = time.perf_counter
        start = self.last_start = clock()
        self.writer.write(t.request)
        head = await self.reader.readuntil(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 200"):
            raise RuntimeError(f"{t.name}: {head[:200]!r}")
        if b"chunked" not in head.lower():
            raise RuntimeError(f"{t.name}: not a chunked stream: {head[:200]!r}")
        ttft: float | None = None
        tail = b""
        done = False
        while True:
            data = await self.reader.read(1 << 16)
            if not data:
                raise RuntimeError(f"{t.name}: connection closed mid-stream")
            window = tail + data
            if ttft is None and any(m in window for m in t.first_token):
                ttft = clock() - start
            if not done and DONE in window:
                done = True
            tail = window[-4096:]
            if done and tail.endswith(END):
                break
        total = clock() - start
        if t.check is not None and t.check not in tail:
            raise RuntimeError(f"{t.name}: response lacks {t.check!r}: …{tail[-300:]!r}")
        return (ttft if ttft is not None else total), total


@dataclass
class LoadResult:
    streams: int
    requests: int = 0
    tokens: int = 0
    wall: float = 0.0
    ttfts: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    cpu: float | None = None  # toolwire CPU seconds during the run

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.wall if self.wall else float("nan")


async def load(target: Endpoint, streams: int, seconds: float, tokens_per_request: int) -> LoadResult:
    """``streams`` connections, each sending requests back to back for ``seconds``."""
    result = LoadResult(streams)
    conns = [Connection(target) for _ in range(streams)]
    await asyncio.gather(*(c.open() for c in conns))
    start = time.perf_counter()
    stop_at = start + seconds
    last_end = start

    async def worker(conn: Connection) -> None:
        nonlocal last_end
        while time.perf_counter() < stop_at:
            try:
                ttft, _total = await conn.request()
            except (RuntimeError, OSError, asyncio.IncompleteReadError) as exc:
                result.errors.append(str(exc)[:300])
                await conn.close()
                conn.writer = None
                continue
            result.requests += 1
            result.tokens += tokens_per_request
            result.ttfts.append(ttft)
            last_end = time.perf_counter()

    await asyncio.gather(*(worker(c) for c in conns))
    result.wall = last_end - start
    await asyncio.gather(*(c.close() for c in conns))
    return result


async def alternating_ttft(targets: list[Endpoint], n: int) -> list[list[float]]:
    """``n`` times to first token per target, one request at a time: each round asks every
    target once, the first target first and the others in rotating order (no target always
    follows the same one)."""
    conns = [Connection(t) for t in targets]
    for _ in range(5):  # warm-up: connections, caches, template compile
        for c in conns:
            await c.request()
    times: list[list[float]] = [[] for _ in conns]
    rest = list(range(1, len(conns)))
    for i in range(n):
        k = i % len(rest) if rest else 0
        for j in [0, *rest[k:], *rest[:k]]:
            times[j].append((await conns[j].request())[0])
    for c in conns:
        await c.close()
    return times


# ---------------------------------------------------------------------- the section


PACE_MS = 5.0  # the paced backend: 200 tokens/s per stream, like a real model
# app-side what-ifs (``bench.experiments``) measured beside the app as is. The first round — a lean
# streaming HTTP client instead of httpx, a plain SSE response — was adopted into app/.
WHAT_IFS: tuple[tuple[str, ...], ...] = (("slice100",), ("no_head_hold",))


def toolwire_load(proxy: Proc, streams: int, seconds: float, tokens: int, target: Endpoint | None = None) -> LoadResult:
    """Load through ``proxy`` (toolwire, or the relay with its own ``target``), with its CPU time."""
    cpu0 = tree_cpu(proxy.process.pid)
    r = asyncio.run(load(target or proxy_target(proxy.port), streams, seconds, tokens))
    r.cpu = tree_cpu(proxy.process.pid) - cpu0
    return r


def measure(ctx: Any, experiments: tuple[str, ...] = (), full: bool = True) -> dict[str, Any]:
    """One toolwire configuration. ``full``: TTFT, 1/16/64 streams both ways, paced 64 streams;
    otherwise (a what-if) TTFT, toolwire at 64 streams and paced 64 streams."""
    label = f" [{'+'.join(experiments)}]" if experiments else ""
    tokens = completion_tokens()
    work = ctx.out / "proxy"
    work.mkdir(parents=True, exist_ok=True)
    seconds = 2.0 if ctx.quick else 5.0
    n_ttft = 60 if ctx.quick else (300 if full else 200)
    procs: list[Proc] = []
    try:
        backend = start_backend(tokens, work)
        procs.append(backend)
        proxy = start_proxy(backend.url, experiments)
        procs.append(proxy)
        relay = start_relay(backend.port)
        procs.append(relay)
        direct, proxied = direct_target(backend.port), proxy_target(proxy.port)
        relayed = Endpoint("relay", relay.port, direct.request, direct.first_token, None)
        ctx.log(f"proxy{label}: TTFT, {n_ttft} alternating requests each way (direct, relay, toolwire)")
        ttft_direct, ttft_relay, ttft_proxy = asyncio.run(alternating_ttft([direct, relayed, proxied], n_ttft))
        relay.stop()
        runs: dict[str, dict[int, LoadResult]] = {"backend": {}, "toolwire": {}}
        for streams in CONCURRENCY if full else (64,):
            if full:
                ctx.log(f"proxy{label}: {streams} streams straight from the backend, {seconds:.0f} s")
                runs["backend"][streams] = asyncio.run(load(direct, streams, seconds, len(tokens)))
            ctx.log(f"proxy{label}: {streams} streams through toolwire, {seconds:.0f} s")
            runs["toolwire"][streams] = toolwire_load(proxy, streams, seconds, len(tokens))
        proxy.stop()
        paced_backend = start_backend(tokens, work, PACE_MS)
        procs.append(paced_backend)
        paced_proxy = start_proxy(paced_backend.url, experiments)
        procs.append(paced_proxy)
        ctx.log(f"proxy{label}: 64 paced streams ({PACE_MS:g} ms a token) through toolwire, {seconds:.0f} s")
        paced = toolwire_load(paced_proxy, 64, seconds, len(tokens))
        paced_relay = start_relay(paced_backend.port)
        procs.append(paced_relay)
        paced_direct = direct_target(paced_backend.port)
        ctx.log(f"proxy{label}: 64 paced streams through the do-nothing relay, {seconds:.0f} s")
        relayed_paced = toolwire_load(paced_relay, 64, seconds, len(tokens), Endpoint(
            "relay", paced_relay.port, paced_direct.request, paced_direct.first_token, None))
    finally:
        for proc in reversed(procs):
            proc.stop()
    return {"experiments": list(experiments), "tokens_per_request": len(tokens), "ttft_direct": ttft_direct,
            "ttft_relay": ttft_relay, "ttft_proxy": ttft_proxy, "runs": runs, "paced": paced,
            "paced_relay": relayed_paced}


# where toolwire's time to first token goes: (label, trace mark) in path order; times from the client's send
MILESTONES = (
    ("request reaches the app", "entry"),
    ("request validated", "parse_request_end"),
    ("prompt rendered, constraint planned", "plan_request_end"),
    ("parsers built", "parser_end"),
    ("backend asked", "backend_post_start"),
    ("backend's response head", "backend_head"),
    ("backend's first token", "backend_first_data"),
    ("response head sent", "head"),
    ("first token's chunk sent", "first_body"),
    ("client has the first token", "client_ttft"),
)


PACED_TTFT_TEXT = "I'll write the file for you now: it renders the template and writes the result to disk."


def ttft_breakdown(ctx: Any, n: int, pace_ms: float = 0.0) -> dict[str, float]:
    """p50 of each milestone (ms after the client sent the request), from a toolwire run with the
    ``trace`` diagnostic (``bench.experiments``) and this client's own clock (both read the
    system-wide monotonic clock); direct requests alternate with the proxied ones (``direct``,
    ``added``). ``pace_ms``: the backend spaces its tokens like a real model and the completion is
    one short sentence (so no burst follows the first token)."""
    tokens = tokenize(PACED_TTFT_TEXT, ()) if pace_ms else completion_tokens()
    work = ctx.out / "proxy"
    trace = work / "ttft-trace.json"
    trace.unlink(missing_ok=True)
    backend = start_backend(tokens, work, pace_ms)
    os.environ["BENCH_TRACE"] = str(trace)
    try:
        proxy = start_proxy(backend.url, ("trace",))
    finally:
        del os.environ["BENCH_TRACE"]
    target = proxy_target(proxy.port)
    if pace_ms:
        target = Endpoint(target.name, target.port, target.request, target.first_token, b'"finish_reason":"stop"')

    async def go() -> tuple[list[float], list[tuple[float, float]]]:
        direct, conn = Connection(direct_target(backend.port)), Connection(target)
        for _ in range(5):
            await direct.request()
            await conn.request()
        direct_ttfts: list[float] = []
        sent: list[tuple[float, float]] = []
        for _ in range(n):
            direct_ttfts.append((await direct.request())[0])
            ttft, _total = await conn.request()
            sent.append((conn.last_start, ttft))
        await direct.close()
        await conn.close()
        return direct_ttfts, sent

    try:
        direct_ttfts, sent = asyncio.run(go())
    finally:
        proxy.stop()
        backend.stop()
    marks = json.loads(trace.read_text())[-n:]
    rows = [{**{k: (v - start) * 1e3 for k, v in m.items()}, "client_ttft": ttft * 1e3}
            for (start, ttft), m in zip(sent, marks, strict=True)]
    result = {mark: median([r[mark] for r in rows if mark in r]) for _label, mark in MILESTONES}
    result["direct"] = median(direct_ttfts) * 1e3
    result["added"] = result["client_ttft"] - result["direct"]
    return result


def load_summary(r: LoadResult) -> dict[str, Any]:
    cpu = r.cpu if r.cpu is not None else float("nan")
    return {"tokens_per_s": r.tokens_per_s, "requests": r.requests, "tokens": r.tokens, "wall_s": r.wall,
            "cpu_s": cpu, "cpu_util": cpu / r.wall if r.wall else float("nan"),
            "cpu_ms_per_1k_tokens": cpu / r.tokens * 1e6 if r.tokens else float("nan"),
            "tokens_per_cpu_s": r.tokens / cpu if cpu else float("nan"),
            "ttft_p50_ms": median(r.ttfts) * 1e3, "ttft_p99_ms": percentile(r.ttfts, 99) * 1e3,
            "errors": len(r.errors), "error_samples": r.errors[:3]}


def summarize(m: dict[str, Any]) -> dict[str, Any]:
    td, tr, tp = m["ttft_direct"], m["ttft_relay"], m["ttft_proxy"]
    return {
        "experiments": m["experiments"],
        "tokens_per_request": m["tokens_per_request"],
        "ttft_ms": {"direct_p50": median(td) * 1e3, "direct_p99": percentile(td, 99) * 1e3,
                    "proxy_p50": median(tp) * 1e3, "proxy_p99": percentile(tp, 99) * 1e3,
                    "added_p50": (median(tp) - median(td)) * 1e3,
                    "added_p99": (percentile(tp, 99) - percentile(td, 99)) * 1e3,
                    "relay_p50": median(tr) * 1e3, "relay_p99": percentile(tr, 99) * 1e3,
                    "relay_added_p50": (median(tr) - median(td)) * 1e3,
                    "relay_added_p99": (percentile(tr, 99) - percentile(td, 99)) * 1e3,
                    "over_relay_p50": (median(tp) - median(tr)) * 1e3,
                    "samples": len(tp)},
        "backend": {n: load_summary(r) for n, r in m["runs"]["backend"].items()},
        "toolwire": {n: load_summary(r) for n, r in m["runs"]["toolwire"].items()},
        "paced": load_summary(m["paced"]),
        "paced_relay": load_summary(m["paced_relay"]),
    }


def run(ctx: Any) -> Section:
    section = Section(__name__, TITLE)
    s = summarize(measure(ctx))
    ctx.log("proxy: where the time to first token goes (toolwire with the trace diagnostic)")
    s["ttft_breakdown_ms"] = breakdown = ttft_breakdown(ctx, 60 if ctx.quick else 200)
    ctx.log(f"proxy: the same with a backend pacing its tokens {PACE_MS:g} ms apart")
    s["ttft_breakdown_paced_ms"] = paced_breakdown = ttft_breakdown(ctx, 30 if ctx.quick else 100, PACE_MS)
    t = s["ttft_ms"]
    section.figure("proxy.ttft_added_p50_ms", "added time to first token, p50", t["added_p50"], "ms", None,
                   f"toolwire {fmt(t['proxy_p50'])} ms vs backend {fmt(t['direct_p50'])} ms")
    section.figure("proxy.ttft_added_ratio_to_relay", "added time to first token ÷ the relay's, p50",
                   t["added_p50"] / t["relay_added_p50"] if t["relay_added_p50"] > 0 else float("nan"), "×",
                   TTFT_RATIO_TARGET, f"toolwire adds {fmt(t['added_p50'])} ms, the relay {fmt(t['relay_added_p50'])} ms")
    pr, pt = s["paced_relay"], s["paced"]
    section.figure("proxy.cpu_per_token_ratio_to_relay.paced", "CPU per separately written token ÷ the relay's",
                   pt["cpu_ms_per_1k_tokens"] / pr["cpu_ms_per_1k_tokens"] if pr["cpu_ms_per_1k_tokens"] else float("nan"),
                   "×", CPU_RATIO_TARGET, f"64 streams, backend pacing tokens {PACE_MS:g} ms apart: toolwire "
                   f"{fmt(pt['cpu_ms_per_1k_tokens'])} ms, relay {fmt(pr['cpu_ms_per_1k_tokens'])} ms per 1 000 tokens")
    section.figure("proxy.ttft_added_p99_ms", "added time to first token, p99", t["added_p99"], "ms", None,
                   f"toolwire {fmt(t['proxy_p99'])} ms vs backend {fmt(t['direct_p99'])} ms")
    section.figure("proxy.ttft_added_p50_ms.paced", f"added time to first token, p50, backend pacing tokens "
                   f"{PACE_MS:g} ms apart", paced_breakdown["added"], "ms", None,
                   "no burst behind the first token (as from a real model); see the breakdown table")
    section.figure("proxy.ttft_relay_added_p50_ms", "floor: a do-nothing relay adds, p50", t["relay_added_p50"], "ms",
                   None, f"p99 {fmt(t['relay_added_p99'])} ms; toolwire's own share (toolwire − relay) "
                   f"{fmt(t['over_relay_p50'])} ms")
    for streams in CONCURRENCY:
        r, b = s["toolwire"][streams], s["backend"][streams]
        section.figure(f"proxy.tokens_per_s.{streams}", f"proxied tokens/s, {streams} stream(s)", r["tokens_per_s"],
                       "tok/s", None, f"backend alone {fmt(b['tokens_per_s'])} tok/s; toolwire CPU "
                       f"{fmt(r['cpu_util'] * 100)} %")
        section.figure(f"proxy.cpu_ms_per_1k_tokens.{streams}", f"toolwire CPU per 1 000 tokens, {streams} stream(s)",
                       r["cpu_ms_per_1k_tokens"], "ms")
    r64 = s["toolwire"][64]
    section.figure("proxy.tokens_per_core_s.64", "proxied tokens/s per core, 64 streams", r64["tokens_per_cpu_s"],
                   "tok/CPU-s", PER_CORE_TARGET, "tokens ÷ toolwire CPU-seconds")
    p = s["paced"]
    section.figure("proxy.paced.cpu_ms_per_1k_tokens", f"toolwire CPU per 1 000 tokens, 64 paced streams "
                   f"({PACE_MS:g} ms a token)", p["cpu_ms_per_1k_tokens"], "ms", None,
                   f"{fmt(p['tokens_per_s'])} tok/s, no batching possible")
    errors = sum(r["errors"] for group in ("backend", "toolwire") for r in s[group].values()) + p["errors"]
    section.figure("proxy.errors", "failed or malformed responses", errors, "", at_most(0))

    rows = []
    for n in CONCURRENCY:
        r, b = s["toolwire"][n], s["backend"][n]
        rows.append((n, fmt(b["tokens_per_s"]), fmt(r["tokens_per_s"]), fmt(r["cpu_util"] * 100),
                     fmt(r["cpu_ms_per_1k_tokens"]), fmt(r["tokens_per_cpu_s"]), fmt(r["ttft_p50_ms"]),
                     fmt(r["ttft_p99_ms"]), fmt(b["ttft_p50_ms"]), r["requests"], r["errors"] + b["errors"]))
    rows.append((f"64 paced ({PACE_MS:g} ms/token)", "—", fmt(p["tokens_per_s"]), fmt(p["cpu_util"] * 100),
                 fmt(p["cpu_ms_per_1k_tokens"]), fmt(p["tokens_per_cpu_s"]), fmt(p["ttft_p50_ms"]),
                 fmt(p["ttft_p99_ms"]), "—", p["requests"], p["errors"]))
    section.tables.append(table(
        ("streams", "backend tok/s", "toolwire tok/s", "toolwire CPU %", "CPU ms / 1k tok", "tok / CPU-s",
         "TTFT p50 ms", "TTFT p99 ms", "backend TTFT p50 ms", "requests", "errors"), rows))
    section.notes.append(
        f"Completion: {s['tokens_per_request']} tokens (a sentence, then one hermes `<tool_call>` with a "
        f"{ARGUMENT_BYTES}-byte code argument); toolwire runs the `qwen3` reasoning and `hermes` tool parsers, "
        "renders the Qwen3 chat template, and streams OpenAI chunks. TTFT: "
        f"{t['samples']} requests each way, one stream, alternating direct / relay / toolwire; p50 "
        f"{fmt(t['direct_p50'])} / {fmt(t['relay_p50'])} / {fmt(t['proxy_p50'])} ms, "
        f"p99 {fmt(t['direct_p99'])} / {fmt(t['relay_p99'])} / {fmt(t['proxy_p99'])} ms. "
        "Load: closed loop, one keep-alive connection per stream; backend, toolwire and this client share "
        f"{os.cpu_count()} CPUs, so 'per core' divides by toolwire's own CPU time. The paced run spaces tokens "
        f"{PACE_MS:g} ms apart (each SSE event arrives alone, as from a real model): its CPU per 1 000 tokens is "
        "the cost of the per-token path without any batching.")

    section.tables.append(
        "Where toolwire's time to first token goes (p50, ms after the client sent the request; one stream, "
        "toolwire run with the `trace` diagnostic, alternating with direct requests). With the fast backend the "
        "first token is followed by a burst that keeps toolwire and the backend busy on both CPUs; the paced "
        "backend sends one short sentence, a token every few ms, as a model does — no burst, so the client is "
        "never kept from a CPU, and the machine idles between requests (the request path runs cold):\n\n"
        + table(("milestone", "fast backend, ms", f"paced backend ({PACE_MS:g} ms a token), ms"),
                [(label, fmt(breakdown[mark]), fmt(paced_breakdown[mark])) for label, mark in MILESTONES]
                + [("the backend alone: its first token", fmt(breakdown["direct"]), fmt(paced_breakdown["direct"])),
                   ("added", fmt(breakdown["added"]), fmt(paced_breakdown["added"]))]))

    whatifs: dict[str, Any] = {}
    if WHAT_IFS and os.environ.get("BENCH_WHATIF", "1") not in ("0", ""):
        from bench.experiments import ExperimentError

        wrows = [("toolwire as is", fmt(t["added_p50"]), fmt(r64["tokens_per_cpu_s"]),
                  fmt(r64["cpu_ms_per_1k_tokens"]), fmt(p["cpu_ms_per_1k_tokens"]), r64["errors"] + p["errors"])]
        for exps in WHAT_IFS:
            name = "+".join(exps)
            try:
                w = summarize(measure(ctx, exps, full=False))
            except (ExperimentError, RuntimeError) as exc:
                section.notes.append(f"What-if `{name}` could not run: {exc}")
                continue
            whatifs[name] = w
            if name == "slice100":
                section.figure("proxy.ttft_added_p50_ms.slice100", "added time to first token, p50, with "
                               "--sched-slice-us 100 (opt-in)", w["ttft_ms"]["added_p50"], "ms", None,
                               "the target is judged on the default configuration above")
            w64, wp = w["toolwire"][64], w["paced"]
            wrows.append((f"what-if `{name}`", fmt(w["ttft_ms"]["added_p50"]), fmt(w64["tokens_per_cpu_s"]),
                          fmt(w64["cpu_ms_per_1k_tokens"]), fmt(wp["cpu_ms_per_1k_tokens"]),
                          w64["errors"] + wp["errors"]))
        section.tables.append(
            "Other toolwire configurations, measured the same way (see `bench/experiments.py`: `slice100` is "
            "toolwire's own opt-in `--sched-slice-us 100`; other what-ifs monkeypatch the benchmark's toolwire "
            "process only):\n\n" + table(
                ("configuration", "added TTFT p50 ms", "tok / CPU-s, 64 streams", "CPU ms / 1k tok, 64 streams",
                 "CPU ms / 1k tok, paced", "errors"), wrows))
    section.data = {"as_is": s, "what_if": whatifs}
    ctx.shared["proxy"] = section.data
    return section


def profile_run(streams: int, seconds: float, prof_path: Path, experiments: tuple[str, ...] = (),
                pace_ms: float = 0.0) -> Path:
    """Run toolwire under cProfile while ``streams`` streams load it (for ``bench.profile``)."""
    prof_path.parent.mkdir(parents=True, exist_ok=True)
    tokens = completion_tokens()
    backend = start_backend(tokens, prof_path.parent, pace_ms)
    proxy = start_proxy(backend.url, experiments, profile=prof_path)
    try:
        r = asyncio.run(load(proxy_target(proxy.port), streams, seconds, len(tokens)))
        print(f"{r.requests} requests, {r.tokens_per_s:.0f} tok/s under the profiler, {len(r.errors)} errors")
    finally:
        proxy.stop()
        backend.stop()
    return prof_path
