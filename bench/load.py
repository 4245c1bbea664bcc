"""Full-size load test (issue 8): 500 concurrent streaming requests through one toolwire worker.

toolwire runs as its own process (one uvicorn worker) in front of a scripted vLLM backend that
answers each request with a completion derived from that request (so any cross-talk between
streams shows). Two identical bursts run back to back; toolwire's resident memory is read from
``/proc`` before, between and after them. Targets: no errors, no cross-talk, and no growth from
the first burst to the second (memory returns to its post-burst baseline rather than climbing —
CPython keeps freed arenas, so the first burst's peak is not given back to the OS).
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from typing import Any

import httpx

from bench.proxy import answers
from bench.report import Section, at_most

TITLE = "Load: 500 concurrent streams through one worker"
STREAMS = 500
TOKENS = 30


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


async def _burst(url: str, count: int) -> tuple[int, int, float]:
    """``count`` concurrent streams; returns (errors, cross-talk mismatches, seconds)."""
    limits = httpx.Limits(max_connections=count + 16, max_keepalive_connections=count + 16)
    errors = mismatches = 0
    started = time.monotonic()
    async with httpx.AsyncClient(timeout=120, limits=limits) as client:
        async def one(i: int) -> None:
            nonlocal errors, mismatches
            body = {"messages": [{"role": "user", "content": f"request-{i}"}], "stream": True}
            parts: list[str] = []
            try:
                async with client.stream("POST", url + "/v1/chat/completions", json=body) as response:
                    if response.status_code != 200:
                        errors += 1
                        return
                    async for line in response.aiter_lines():
                        if line.startswith("data: {"):
                            chunk = json.loads(line[6:])
                            if "error" in chunk:
                                errors += 1
                                return
                            if chunk["choices"]:
                                parts.append(chunk["choices"][0]["delta"].get("content") or "")
            except httpx.HTTPError:
                errors += 1
                return
            if "".join(parts) != "".join(f"answer-{i}-{k} " for k in range(TOKENS)):
                mismatches += 1

        await asyncio.gather(*(one(i) for i in range(count)))
    return errors, mismatches, time.monotonic() - started


def run(ctx: Any) -> Section:
    from tests.scripted_backend import Script, ScriptedBackend

    section = Section("load", TITLE)
    streams = 100 if ctx.quick else STREAMS
    backend = ScriptedBackend("vllm").start()

    def echo(body: dict[str, Any]) -> Script:
        marker = body["prompt"].rsplit("request-", 1)[1].split("<", 1)[0].strip()
        return Script(pieces=[f"answer-{marker}-{k} " for k in range(TOKENS)], delay=0.002)

    backend.responder = echo
    port = _free_port()
    template = ctx.root / "tests" / "data" / "templates" / "Qwen-Qwen3-0.6B.jinja"
    proxy = subprocess.Popen([sys.executable, "-m", "app.cli", "serve", "--backend", backend.url, "--port", str(port),
                              "--chat-template", str(template), "--tool-call-parser", "hermes", "--log-level", "warning"],
                             cwd=ctx.root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             env={**os.environ, "PYTHONPATH": str(ctx.root)})
    url = f"http://127.0.0.1:{port}"
    try:
        answers(url + "/health", 60)  # (a proxy that never answers fails the warm-up below)
        asyncio.run(_burst(url, 20))  # warm up
        baseline = _rss_mb(proxy.pid)
        ctx.log(f"load: burst 1 of {streams} concurrent streams")
        errors1, mismatch1, secs1 = asyncio.run(_burst(url, streams))
        time.sleep(1)
        after1 = _rss_mb(proxy.pid)
        ctx.log(f"load: burst 2 of {streams} concurrent streams")
        errors2, mismatch2, secs2 = asyncio.run(_burst(url, streams))
        time.sleep(1)
        after2 = _rss_mb(proxy.pid)
        metrics = httpx.get(url + "/metrics", timeout=5).text
        active = next((line.split()[-1] for line in metrics.splitlines()
                       if line.startswith("toolwire_active_streams ")), "?")
    finally:
        proxy.terminate()
        proxy.wait(20)
        backend.stop()
    section.figure("load.errors", f"failed streams ({2 * streams} in two bursts)", float(errors1 + errors2), "",
                   at_most(0))
    section.figure("load.crosstalk", "streams that got another stream's text", float(mismatch1 + mismatch2), "",
                   at_most(0))
    section.figure("load.rss_growth_mb", "resident memory growth, burst 2 over burst 1", after2 - after1, "MB",
                   at_most(10), note=f"baseline {baseline:.0f} MB, after burst 1 {after1:.0f} MB, "
                                     f"after burst 2 {after2:.0f} MB")
    section.figure("load.active_after", "active streams after the bursts", float(active) if active != "?" else None,
                   "", at_most(0))
    tokens = streams * TOKENS
    section.tables.append(
        "| burst | streams | seconds | tokens/s | errors | cross-talk |\n|---|---|---|---|---|---|\n"
        f"| 1 | {streams} | {secs1:.1f} | {tokens / secs1:,.0f} | {errors1} | {mismatch1} |\n"
        f"| 2 | {streams} | {secs2:.1f} | {tokens / secs2:,.0f} | {errors2} | {mismatch2} |")
    section.notes.append(
        f"Each stream asks for its own completion ({TOKENS} tokens, 2 ms apart, derived from the request) and must "
        "receive exactly that text. The scripted backend and this client share the machine's 2 CPUs with toolwire. "
        "`make test` runs a reduced version (120 streams in-process, tests/test_faults.py).")
    return section
