"""Section: the first token, before and after (issue 35, goal 4) — the same request to toolwire as it
was (``BENCH_FIRST_TOKEN_BEFORE``, c640f5c by default) and as it is, one request to each in turn.

Both builds serve from one scripted backend (``bench.backend``; the Qwen3 template, the ``qwen25``
and ``qwen3`` parsers: ``bench.offload.start_toolwire``). This process sends a one-message Chat
Completions stream — with the agent tools of ``bench.cases`` and without tools — each on a fresh
connection (as ``../shared/peers/smg/run_all.sh ttft`` does), to one build and then the other, the
order alternating each round, and times the first generated text. Interleaved request by request,
both builds meet the machine as it is at that moment: the ratio of their medians is free of the
drift that separates two runs made one after the other.

Two backends, one after the other (``RIGS``): one that writes its whole answer at once (as
``run_all.sh`` does), and one that pauses after each token as an engine's decoding steps do. On a
machine of few CPUs the first keeps a CPU busy for a millisecond while toolwire's one thread, woken
by its first bytes, waits for that CPU (the kernel wakes a reader where its writer runs): its
first token carries that wait. The paced one measures toolwire's own time to the first token.
"""

from __future__ import annotations

import json
import os
import re
import socket
import time
from pathlib import Path
from typing import Any

from bench.cases import TOOLS
from bench.proxy import Proc, start_backend
from bench.report import Section, at_most, fmt, median, percentile, table

TITLE = "First token, before and after: one request to each build in turn"
ROOT = Path(__file__).resolve().parent.parent
BEFORE = "c640f5c"
#: the issue's target: the first token no later than before
RATIO_TARGET = at_most(1.0)
#: the first generated text in a Chat Completions stream (a content delta that holds a character)
FIRST = re.compile(rb'"content":"[^"]')
#: seconds between two requests: what a build does after its answer is done before the other's request
GAP = float(os.environ.get("BENCH_FIRST_TOKEN_GAP", "0.02"))
ANSWER = "Hello there, this is a short answer. " + "More words follow here. " * 40
#: the backends measured with, in turn: (name, milliseconds between its tokens, its answer) — a
#: paced answer is short, so that a round stays quick
RIGS = (("burst", 0.0, ANSWER), ("paced", 2.0, "Hello there, this is a short answer."))


def request(port: int, tools: bool) -> bytes:
    body: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "Say hello."}], "stream": True,
                            "max_tokens": 4096}
    if tools:
        body["tools"] = TOOLS
    return chat_request(port, body)


def chat_request(port: int, body: dict[str, Any]) -> bytes:
    """``body`` as a ``POST /v1/chat/completions`` on a connection of its own (``Connection: close``)."""
    data = json.dumps(body).encode()
    return (f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n").encode() + data


def first_token(port: int, raw: bytes, shown: re.Pattern[bytes] = FIRST) -> float:
    """Seconds from sending ``raw`` on a new connection to the first generated text (the first
    match of ``shown``); the answer is read to its end (a stream that ends without ``[DONE]`` is an
    error)."""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        start = time.perf_counter()
        sock.sendall(raw)
        seen, first = b"", None
        while data := sock.recv(1 << 16):
            seen += data
            if first is None and shown.search(seen):
                first = time.perf_counter() - start
    if first is None or b"[DONE]" not in seen:
        raise RuntimeError(f"no first token, or no end: {seen[:300]!r}")
    return first


def interleaved(ports: dict[str, int], tools: bool, rounds: int, warm: int = 30) -> dict[str, list[float]]:
    """Each build's first-token times over ``rounds`` rounds, one request to each per round."""
    raws = {name: request(port, tools) for name, port in ports.items()}
    names = list(ports)
    for _ in range(warm):
        for name in names:
            first_token(ports[name], raws[name])
    got: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        for name in names if r % 2 == 0 else reversed(names):
            got[name].append(first_token(ports[name], raws[name]))
            time.sleep(GAP)
    return got


def run(ctx: Any) -> Section:
    from bench.offload import before_tree

    section = Section(__name__, TITLE)
    commit = os.environ.get("BENCH_FIRST_TOKEN_BEFORE", BEFORE)
    before = before_tree(ctx.out / "first_token", commit)
    if before is None:
        section.notes.append(f"skipped: {commit} is not in this checkout (a shallow clone)")
        return section
    rounds = 60 if ctx.quick else 300
    rows: list[tuple[str, ...]] = []
    for rig, pace_ms, answer in RIGS:
        rows += _rig(ctx, section, before, rig, pace_ms, answer, rounds)
    section.tables.append(table(("backend", "request", f"before ({commit}), p50 ms", "after, p50 ms",
                                 "after ÷ before", "after − before, paired: median (quartiles) ms"), rows))
    section.notes.append(
        "Each request on a new connection, one build then the other, the order alternating each round; "
        "this process is the client (at its own priority). Both builds answer from the same scripted backend, "
        "so their difference is toolwire's own time before the first token. The burst backend writes its "
        "whole answer at once; the paced one pauses after each token, as an engine's decoding steps do "
        f"({RIGS[1][1]:g} ms).")
    return section


def _rig(ctx: Any, section: Section, before: Path, rig: str, pace_ms: float, answer: str, rounds: int
         ) -> list[tuple[str, ...]]:
    """Both builds on one backend (``RIGS``): the table's rows, the section's figures and data."""
    from bench.offload import start_toolwire
    from bench.shapes import tokens_of

    workdir = ctx.out / "first_token"
    backend: Proc = start_backend(tokens_of(answer), workdir / f"backend-{rig}", pace_ms)
    url = f"http://127.0.0.1:{backend.port}"
    processes = {}
    rows: list[tuple[str, ...]] = []
    try:
        for name, tree in (("before", before), ("after", ROOT)):
            state = workdir / name / "state"
            state.mkdir(parents=True, exist_ok=True)
            process, served = start_toolwire(tree, url, "qwen25", "--state-dir", str(state))
            processes[name] = (process, int(served.rsplit(":", 1)[1]))
        for tools in (True, False):
            label = "with tools" if tools else "without tools"
            ctx.log(f"first_token: {rig} backend, {label}, {rounds} rounds")
            got = interleaved({name: port for name, (_, port) in processes.items()}, tools, rounds)
            p50 = {name: median(times) * 1e3 for name, times in got.items()}
            paired = sorted((a - b) * 1e3 for a, b in zip(got["after"], got["before"], strict=True))
            ratio = p50["after"] / p50["before"]
            key = "first_token.after_over_before." + ("tools" if tools else "no_tools") + (
                "" if rig == "burst" else f".{rig}")
            section.figure(key, f"first token, after ÷ before at p50: {label}, {rig} backend", ratio, "×",
                           RATIO_TARGET, f"{fmt(p50['after'])} vs {fmt(p50['before'])} ms; after − before, "
                           f"request by request: median {fmt(median(paired), 3)} ms")
            spread = f"{fmt(percentile(paired, 25), 3)} … {fmt(percentile(paired, 75), 3)}"
            rows.append((rig, label, fmt(p50["before"]), fmt(p50["after"]), fmt(ratio),
                         f"{fmt(median(paired), 3)} ({spread})"))
            section.data[f"{rig}, {label}"] = {"p50_ms": p50, "ratio": ratio, "paired_ms": median(paired)}
    finally:
        for process, _ in processes.values():
            Proc(process, 0).stop()  # type: ignore[arg-type]  # (a bytes pipe: stopped alike)
        backend.stop()
    return rows
