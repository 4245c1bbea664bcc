"""The app's own per-request cost, in process, warm, in CPU µs of this thread (steadier than wall
time on a shared machine), best of repeats:

* ``chat 400``: a POST to the chat route whose body is not JSON (a 400 from the endpoint: every
  layer down to it and back, no backend);
* ``livez``: ``GET /livez``;
* ``chat stream, tools`` / ``chat stream, no tools``: the first-token request of the side-by-side
  with SGLang's gateway (``../shared/peers/smg``: one user message, two tools or none, streamed,
  Qwen2.5's template, the ``qwen25`` tool and ``qwen3`` reasoning parsers, a vLLM backend) answered
  by a do-nothing backend (the backend client's ``post`` hands back eight canned tokens at once, so
  no socket is touched; everything from the request to the last chunk is measured);
* ``wire, tools`` / ``wire, no tools``: the same request over loopback through uvicorn (the app's
  own protocol class, uvloop), a new connection per request as the side-by-side makes; the client
  is in this thread too (the same for both trees), and so is the kernel's share of the sockets.

``python -m bench.stack`` measures this checkout. ``python -m bench.stack --against DIR`` measures
this checkout and the one at ``DIR`` (an older toolwire, say) side by side in one run: each
measure in a process of its own, the two trees alternated ``--runs`` times, and prints per case the
best of each and new ÷ old. The measuring code is this file's, run against ``DIR``'s ``app``
package (only ``create_app``, ``Settings``, ``uvicorn_options`` and the backend client's ``post``
are used, which both have). ``--profile`` writes a cProfile of each case and tree to
``bench/out/profile/stack-*.prof`` and prints the top of each.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import logging
import os
import pstats
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
TEMPLATE = Path("/work/shared/peers/smg/qwen25_template.jinja")
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather forecast", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city", "days"]}}},
    {"type": "function", "function": {"name": "write_file", "description": "Write a text file.", "parameters": {
        "type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
        "required": ["path", "content"]}}},
]


def chat_body(tools: bool) -> bytes:
    body: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "Go. SCENARIO:plain200"}],
                            "stream": True, "max_tokens": 16000}
    if tools:
        body["tools"] = TOOLS
    return json.dumps(body).encode()


def canned_stream(tokens: int = 8) -> bytes:
    """A vLLM ``/v1/completions`` stream, de-chunked: ``tokens`` text events, the finish, usage, done."""
    base = {"id": "cmpl-x", "object": "text_completion", "created": 0, "model": "m"}
    events = [{**base, "choices": [{"index": 0, "text": f" w{i}", "logprobs": None, "finish_reason": None}]}
              for i in range(tokens)]
    events.append({**base, "choices": [{"index": 0, "text": "", "logprobs": None, "finish_reason": "stop"}]})
    events.append({**base, "choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": tokens,
                                                      "total_tokens": 10 + tokens}})
    return b"".join(b"data: " + json.dumps(e, separators=(",", ":")).encode() + b"\n\n" for e in events) + \
        b"data: [DONE]\n\n"


class Canned:
    """What the backend client's ``post`` returns, with a canned body and no socket."""

    status_code = 200
    body = canned_stream()

    async def aiter_bytes(self) -> AsyncIterator[bytes]:
        yield self.body

    async def aread(self) -> bytes:
        return self.body

    async def aclose(self, finished: bool = False) -> None:
        return None


async def canned_post(self: Any, url: str, body: bytes, headers: Any) -> Canned:
    return Canned()


async def probe_backend() -> tuple[asyncio.AbstractServer, int]:
    """The backend's probes (``/v1/models`` as vLLM answers it, 404 for anything else): asked at
    start-up only."""
    models = json.dumps({"object": "list", "data": [{"id": "m", "object": "model", "owned_by": "vllm",
                                                      "max_model_len": 8192}]}).encode()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                if length:
                    await reader.readexactly(length)
                path = head.split(b" ")[1]
                if path == b"/v1/models":
                    writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: "
                                 + str(len(models)).encode() + b"\r\n\r\n" + models)
                elif path == b"/health":
                    writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
                else:
                    writer.write(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


def scope_of(method: str, path: str, body: bytes) -> dict[str, Any]:
    return {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method, "path": path,
            "raw_path": path.encode(), "root_path": "", "scheme": "http", "query_string": b"",
            "headers": [(b"host", b"x"), (b"content-type", b"application/json"),
                        (b"content-length", str(len(body)).encode())],
            "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 2), "state": {}}


async def asgi_once(app: Any, method: str, path: str, body: bytes) -> int:
    """One request straight into the ASGI app; its status (the whole response is consumed)."""
    sent: list[dict[str, Any]] = []
    messages = [{"type": "http.request", "body": body, "more_body": False}]
    gone = asyncio.Event()

    async def receive() -> dict[str, Any]:
        if messages:
            return messages.pop()
        await gone.wait()  # as a server's receive: the disconnect comes only when the client leaves
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await asyncio.create_task(app(scope_of(method, path, body), receive, send))  # a task per request, as a server
    gone.set()
    return int(sent[0]["status"])


def wire_request(port: int, body: bytes) -> bytes:
    return (f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode() + body


async def wire_once(port: int, request: bytes) -> int:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    data = await reader.read()
    writer.close()
    if b"[DONE]" not in data:
        raise RuntimeError(f"no [DONE] in {data[:300]!r}")
    return int(data[9:12])


Case = Callable[[], Awaitable[int]]


async def best_us(case: Case, n: int, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        started = time.thread_time()
        for _ in range(n):
            await case()
        best = min(best, (time.thread_time() - started) / n)
    return best * 1e6


async def measure(n: int, repeat: int, profile: str | None, only: str | None) -> dict[str, float]:
    """Every case in this process: ``{case: best µs}``; with ``profile``, a cProfile per case."""
    import uvicorn

    from app.api.server import create_app, uvicorn_options
    from app.backends.streamhttp import StreamingClient
    from app.settings import Settings

    logging.disable(logging.CRITICAL)
    StreamingClient.post = canned_post  # type: ignore[assignment,method-assign]
    probes, probe_port = await probe_backend()
    state = tempfile.mkdtemp(prefix="stack-")
    settings = Settings(backend=f"http://127.0.0.1:{probe_port}", backend_type="vllm", chat_template=TEMPLATE,
                        tool_call_parser="qwen25", reasoning_parser="qwen3", state_dir=Path(state),
                        log_level="warning")
    app = create_app(settings)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_config=None, lifespan="on", **uvicorn_options(settings))
    server = uvicorn.Server(config)
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        await asyncio.sleep(0.01)
    cases: dict[str, Case] = {
        "chat 400": lambda: asgi_once(app, "POST", "/v1/chat/completions", b"{nope"),
        "livez": lambda: asgi_once(app, "GET", "/livez", b""),
        "chat stream, tools": lambda: asgi_once(app, "POST", "/v1/chat/completions", chat_body(True)),
        "chat stream, no tools": lambda: asgi_once(app, "POST", "/v1/chat/completions", chat_body(False)),
        "wire, tools": lambda: wire_once(port, wire_request(port, chat_body(True))),
        "wire, no tools": lambda: wire_once(port, wire_request(port, chat_body(False))),
    }
    results: dict[str, float] = {}
    try:
        for label, case in cases.items():
            if only and only not in label:
                continue
            status = await case()
            assert status in (200, 400), (label, status)
            for _ in range(50):
                await case()
            rounds = n if label.startswith(("chat 400", "livez")) else max(1, n // 4)
            results[label] = await best_us(case, rounds, repeat)
            if profile:
                prof = cProfile.Profile()
                prof.enable()
                for _ in range(rounds):
                    await case()
                prof.disable()
                prof.dump_stats(f"{profile}-{label.replace(' ', '').replace(',', '-')}.prof")
    finally:
        server.should_exit = True
        await serving
        probes.close()
    return results


def child(args: argparse.Namespace) -> None:
    try:
        import uvloop
        runner: Any = uvloop.run
    except ImportError:
        runner = asyncio.run
    import app

    results = runner(measure(args.n, args.repeat, args.profile_to, args.only))
    results["tree"] = app.__file__
    print(json.dumps(results))


def run_tree(tree: Path, args: argparse.Namespace, profile: str | None = None, n: int | None = None,
             only: str | None = None, under: tuple[str, ...] = ()) -> tuple[dict[str, float], str]:
    """This file's measure against ``tree``'s ``app`` (in a process of its own, ``under`` a tool): its
    results and its standard error."""
    # run as ``-c`` from the tree: its directory first on sys.path (so its ``app``), not ``bench/``
    cmd = [*under, sys.executable, "-c", f"import runpy; runpy.run_path({str(HERE)!r}, run_name='__main__')",
           "--child", "--n", str(n or args.n), "--repeat", str(1 if under else args.repeat)]
    if profile:
        cmd += ["--profile-to", profile]
    if only or args.only:
        cmd += ["--only", only or args.only]
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONHASHSEED": "0"}  # the same dict orders in every process
    done = subprocess.run(cmd, cwd=tree, env=env, check=True, capture_output=True, text=True)
    results = dict(json.loads(done.stdout.strip().splitlines()[-1]))
    measured = Path(results.pop("tree"))
    assert measured.is_relative_to(tree), f"measured {measured}, not {tree}'s app"
    return results, done.stderr


CACHEGRIND = ("valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null")
#: the cases counted in instructions (the wire's count is mostly the kernel's and the client's)
COUNTED = ("chat 400", "chat stream, tools", "chat stream, no tools")


def instructions(tree: Path, args: argparse.Namespace, label: str) -> float:
    """Instructions per request of ``label`` (valgrind's count, this user space only): two processes
    that differ only in how many requests they measure, the difference divided out — the same on a
    busy machine as on a quiet one."""
    counts = []
    for n in (args.n // 4, args.n):
        _results, err = run_tree(tree, args, n=n, only=label, under=CACHEGRIND)
        counts.append(int(next(line for line in err.splitlines() if "I refs:" in line or "I   refs:" in line)
                          .split(":")[1].replace(",", "").strip()))
    rounds: int = (args.n - args.n // 4) // (1 if label.startswith(("chat 400", "livez")) else 4)
    return float(counts[1] - counts[0]) / rounds


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--against", type=Path, help="another toolwire checkout, measured alternately in this run")
    parser.add_argument("--runs", type=int, default=3, help="processes per tree, alternated")
    parser.add_argument("--n", type=int, default=2000, help="requests per repeat (a quarter for streams)")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--only", help="only the cases whose label contains this")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--instructions", action="store_true",
                        help="count instructions per request under valgrind instead (load-independent; slow)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--profile-to", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    new = HERE.parent.parent
    trees = {"new": new, **({"old": args.against.resolve()} if args.against else {})}
    if args.instructions:
        print(f"{'case':24}" + "".join(f"{name + ' k instr':>14}" for name in trees)
              + ("  new ÷ old" if args.against else ""))
        for label in COUNTED:
            if args.only and args.only not in label:
                continue
            counted = {name: instructions(tree, args, label) for name, tree in trees.items()}
            print(f"{label:24}" + "".join(f"{counted[name] / 1e3:14.1f}" for name in trees)
                  + (f"  {counted['new'] / counted['old']:8.3f}×" if args.against else ""))
        return
    best: dict[str, dict[str, float]] = {name: {} for name in trees}
    load = [os.getloadavg()[0]]
    for _ in range(args.runs):
        for name, tree in (trees.items() if _ % 2 == 0 else reversed(trees.items())):
            for label, us in run_tree(tree, args)[0].items():
                best[name][label] = min(us, best[name].get(label, float("inf")))
        load.append(os.getloadavg()[0])
    print(f"best of {args.runs} processes per tree, {args.repeat} repeats each; "
          f"load {min(load):.1f}–{max(load):.1f} on {os.cpu_count()} CPUs")
    header = f"{'case':24}" + "".join(f"{name + ' µs':>10}" for name in trees) + ("  new ÷ old" if args.against else "")
    print(header)
    for label in best["new"]:
        row = f"{label:24}" + "".join(f"{best[name][label]:10.1f}" for name in trees)
        if args.against:
            row += f"  {best['new'][label] / best['old'][label]:8.2f}×"
        print(row)
    if args.profile:
        out = new / "bench" / "out" / "profile"
        out.mkdir(parents=True, exist_ok=True)
        for name, tree in trees.items():
            run_tree(tree, args, str(out / f"stack-{name}"))
        for prof in sorted(out.glob("stack-*.prof")):
            print(f"== {prof.name}")
            stats = pstats.Stats(str(prof))
            stats.strip_dirs().sort_stats("tottime").print_stats(12)


if __name__ == "__main__":
    main()
