"""Section: non-streaming answers (issue 26, goal 4) — the same answer asked for whole costs no more
of toolwire's CPU than asked for as a stream.

One scripted backend (``bench.backend``) per completion, one toolwire (``bench.proxy_main``: Qwen3
template, ``hermes`` and ``qwen3`` parsers) in front of it; this process sends the same Chat
Completions request with ``stream: true`` and ``stream: false`` in rounds — which of the two goes
first alternating — and reads toolwire's CPU time around each (``bench.cpu``). Completions: a plain answer of ~2 000 tokens
(prose) and one hermes call with a 16 KB code argument, each from a backend that writes its tokens
as fast as it can; and a 4 KB call from a backend pacing its tokens like a model (every token its
own read: no batching either way). Every response is checked (status 200, the call or the text whole).
"""

from __future__ import annotations

import json
import socket
from typing import Any

from bench.cases import FAMILIES, code_text, markers_of, prose_text, render_call, tokenize
from bench.cpu import tree_cpu
from bench.proxy import start_backend, start_proxy
from bench.report import Section, at_most, fmt, median, table

TITLE = "Non-streaming answers: CPU of an answer asked for whole ÷ the same answer streamed"
RATIO_TARGET = at_most(1.0)
PACE_MS = 1.0


def completions() -> list[tuple[str, list[str], float]]:
    """(label, token texts, pace) of each completion measured."""
    hermes = next(f for f in FAMILIES if f.name == "hermes")
    marks = markers_of(hermes)
    plain = prose_text(8 * 1024)  # ~2 000 tokens of 4 characters
    call16 = render_call(hermes, {"path": "src/render.py", "content": code_text(16 * 1024)})
    call4 = render_call(hermes, {"path": "src/render.py", "content": code_text(4 * 1024)})
    return [("plain, ~2 000 tokens", tokenize(plain, marks), 0.0),
            ("16 KB tool call", tokenize(call16, marks), 0.0),
            (f"4 KB tool call, paced {PACE_MS:g} ms a token", tokenize(call4, marks), PACE_MS)]


def post(port: int, body: bytes) -> bytes:
    request = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
               b"Content-Length: " + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body)
    with socket.create_connection(("127.0.0.1", port), timeout=120) as sock:
        sock.sendall(request)
        chunks = []
        while data := sock.recv(1 << 16):
            chunks.append(data)
    return b"".join(chunks)


def body(stream: bool) -> bytes:
    return json.dumps({"model": "bench-model", "stream": stream, "max_tokens": 16000,
                       "messages": [{"role": "user", "content": "Write src/render.py."}],
                       "tools": [{"type": "function", "function": {"name": "write_file", "parameters": {
                           "type": "object", "properties": {"path": {"type": "string"},
                                                            "content": {"type": "string"}}}}}]}).encode()


def measure_one(ctx: Any, tokens: list[str], pace_ms: float, rounds: int, per_round: int) -> dict[str, Any]:
    backend = start_backend(tokens, ctx.out / "whole", pace_ms)
    proxy = start_proxy(backend.url)
    cpu: dict[str, list[float]] = {"stream": [], "whole": []}
    want = "".join(tokens)
    try:
        for kind in cpu:  # warm both paths
            post(proxy.port, body(kind == "stream"))
        for r in range(rounds):
            # the order alternates: what one kind leaves behind (a connection closing) falls on both
            for kind in sorted(cpu, reverse=r % 2 == 1):
                spent = cpu[kind]
                before = tree_cpu(proxy.process.pid)
                for _ in range(per_round):
                    raw = post(proxy.port, body(kind == "stream"))
                    if b" 200 " not in raw[:16] or (b"[DONE]" not in raw if kind == "stream" else b"choices" not in raw):
                        raise RuntimeError(f"{kind} response failed: {raw[:300]!r}")
                spent.append((tree_cpu(proxy.process.pid) - before) / per_round * 1e3)
    finally:
        proxy.stop()
        backend.stop()
    stream_ms, whole_ms = median(cpu["stream"]), median(cpu["whole"])
    return {"stream_ms": stream_ms, "whole_ms": whole_ms, "ratio": whole_ms / stream_ms if stream_ms else None,
            "tokens": len(tokens), "bytes": len(want.encode())}


def run(ctx: Any) -> Section:
    section = Section(__name__, TITLE)
    rows, data = [], {}
    for label, tokens, pace in completions():
        ctx.log(f"whole: {label}")
        paced = pace > 0
        rounds = 4 if ctx.quick else 8  # even: each kind goes first as often as the other
        per_round = (1 if ctx.quick else 2) if paced else (4 if ctx.quick else 8)
        r = measure_one(ctx, tokens, pace, rounds, per_round)
        data[label] = r
        key = "whole.ratio." + ("paced_call4k" if paced else "call16k" if "call" in label else "plain")
        section.figure(key, f"CPU whole ÷ streamed: {label}", r["ratio"], "×", RATIO_TARGET,
                       f"{fmt(r['whole_ms'])} vs {fmt(r['stream_ms'])} ms of toolwire CPU per request")
        rows.append((label, r["tokens"], fmt(r["stream_ms"]), fmt(r["whole_ms"]), fmt(r["ratio"])))
    section.tables.append(table(("completion", "tokens", "streamed, CPU ms", "whole, CPU ms", "whole ÷ streamed"),
                                rows))
    section.notes.append(
        "toolwire's CPU time per request (its process tree's time on a CPU, `bench.cpu`; the median of rounds "
        "whose order alternates), the same request with "
        "`stream: true` and `stream: false`. A non-streaming answer is read from the backend as a stream too "
        "and folded from the same parser events (so the two cannot disagree); it skips encoding and writing "
        "a chunk per backend read.")
    section.data = data
    return section
