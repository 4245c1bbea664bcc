"""Why the backend stream has a client of its own (``app/backends/streamhttp.py``), not httpx:
the same token streams read through both, side by side in one run.

The fast scripted backend (``bench.backend``) streams N tokens, one SSE event per HTTP chunk; this
process POSTs and reads the whole body, alternating httpx (``AsyncClient.stream`` →
``aiter_raw``, a kept-alive connection, as ``app.services`` would configure it) and
``StreamingClient`` (``aiter_bytes``). Per client: CPU time of this process per 1 000 tokens (its
whole cost of reading a stream), and time from the request to the first body bytes, at p50.
Once with the backend bursting (every token written back to back) and once paced (1 ms apart).

Run: ``python -m bench.transport [--rounds 20] [--tokens 2000]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable

import httpx

from app.backends.streamhttp import StreamingClient

BODY = json.dumps({"model": "bench-model", "prompt": "hi", "stream": True, "max_tokens": 10_000}).encode()
HEADERS = {"content-type": "application/json"}


def start_backend(tokens: int, pace_ms: float) -> tuple[subprocess.Popen[str], int]:
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump([f" t{i}" for i in range(tokens)], f)
    proc = subprocess.Popen([sys.executable, "-m", "bench.backend", "--tokens", f.name, "--pace-ms", str(pace_ms)],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    os.unlink(f.name)
    return proc, int(line.split()[1])


Reader = Callable[[str], Awaitable[tuple[float, int]]]


async def measure(read: Reader, url: str) -> tuple[float, float, int]:
    """(CPU seconds, seconds to the first body bytes, body bytes) of one stream."""
    cpu = time.process_time()
    first, size = await read(url)
    return time.process_time() - cpu, first, size


async def run(rounds: int, tokens: int, pace_ms: float) -> dict[str, dict[str, float]]:
    proc, port = start_backend(tokens, pace_ms)
    url = f"http://127.0.0.1:{port}/v1/completions"
    ours = StreamingClient(connect_timeout=5, read_timeout=30)
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=256, keepalive_expiry=30)
    theirs = httpx.AsyncClient(timeout=httpx.Timeout(30, connect=5), limits=limits)

    async def with_ours(url: str) -> tuple[float, int]:
        started = time.perf_counter()
        first = 0.0
        size = 0
        response = await ours.post(url, BODY, HEADERS)
        async for piece in response.aiter_bytes():
            if not size:
                first = time.perf_counter() - started
            size += len(piece)
        await response.aclose()
        return first, size

    async def with_httpx(url: str) -> tuple[float, int]:
        started = time.perf_counter()
        first = 0.0
        size = 0
        async with theirs.stream("POST", url, content=BODY, headers=HEADERS) as response:
            async for piece in response.aiter_raw():
                if not size:
                    first = time.perf_counter() - started
                size += len(piece)
        return first, size

    results: dict[str, list[tuple[float, float, int]]] = {"httpx": [], "streamhttp": []}
    try:
        for read in (with_httpx, with_ours):  # warm both
            await measure(read, url)
        for _ in range(rounds):
            for name, read in (("httpx", with_httpx), ("streamhttp", with_ours)):
                results[name].append(await measure(read, url))
    finally:
        await ours.close()
        await theirs.aclose()
        proc.terminate()
        proc.wait()
    sizes = {size for runs in results.values() for _, _, size in runs}
    assert len(sizes) == 1, f"the two clients read different bodies: {sizes}"
    return {name: {"cpu_ms_per_1k_tokens": statistics.median(c for c, _, _ in runs) * 1e3 * 1000 / tokens,
                   "first_bytes_ms_p50": statistics.median(f for _, f, _ in runs) * 1e3}
            for name, runs in results.items()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--tokens", type=int, default=2000)
    args = parser.parse_args()
    for label, pace in (("burst", 0.0), ("paced 1 ms", 1.0)):
        tokens = args.tokens if pace == 0 else min(args.tokens, 300)
        figures = asyncio.run(run(args.rounds if pace == 0 else max(3, args.rounds // 4), tokens, pace))
        for name, row in figures.items():
            print(f"{label:10} {name:10} CPU {row['cpu_ms_per_1k_tokens']:6.2f} ms / 1k tokens   "
                  f"first bytes p50 {row['first_bytes_ms_p50']:.3f} ms")
        ratio = figures["httpx"]["cpu_ms_per_1k_tokens"] / figures["streamhttp"]["cpu_ms_per_1k_tokens"]
        print(f"{label:10} httpx ÷ streamhttp CPU: {ratio:.1f}×")


if __name__ == "__main__":
    main()
