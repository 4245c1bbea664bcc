"""The design card's packages toolwire does not use, against what it uses instead, side by side in
one run (README "Dependencies"). Needs ``sse-starlette`` and ``partial-json-parser`` installed
beside toolwire (they are not its dependencies): ``pip install sse-starlette partial-json-parser``.

* **sse-starlette**: µs per event pushed through ``EventSourceResponse`` (its pings off, events as
  dicts as its docs show, and as ready-encoded bytes) against ``app.api.sse.SSEResponse`` (the
  chunks ready-encoded, as toolwire's encoders make them), to an ASGI ``send`` that does nothing.
* **partial-json-parser**: a ``qwen25`` tool call with a 16 KB argument streamed in 4-character
  chunks; the partial parser re-parses the call's JSON so far at every chunk (what a parser built
  on it does to read arguments as they grow) against toolwire's streaming core on the same chunks.

Run: ``python -m bench.design_card``.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

from app.api.sse import SSEResponse
from bench.cases import FAMILIES, argument_case
from bench.timing import run_toolwire

EVENTS = 20_000
PAYLOAD = json.dumps({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0, "model": "m",
                      "choices": [{"index": 0, "delta": {"content": " token"}, "finish_reason": None}]})


async def _push(response: Any) -> float:
    """Seconds per event to push ``response``'s events to a ``send`` that does nothing."""
    never = asyncio.Event()

    async def receive() -> dict[str, Any]:
        await never.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        return None

    scope = {"type": "http", "method": "GET", "path": "/", "headers": [], "asgi": {"version": "3.0"}}
    started = time.perf_counter()
    await response(scope, receive, send)
    return (time.perf_counter() - started) / EVENTS


def sse_figures() -> dict[str, float]:
    from sse_starlette.sse import EventSourceResponse

    encoded = b"data: " + PAYLOAD.encode() + b"\n\n"

    async def as_bytes() -> AsyncIterator[bytes]:
        for _ in range(EVENTS):
            yield encoded

    async def as_dicts() -> AsyncIterator[dict[str, str]]:
        for _ in range(EVENTS):
            yield {"data": PAYLOAD}

    async def measure() -> dict[str, list[float]]:
        runs: dict[str, list[float]] = {"toolwire SSEResponse": [], "sse-starlette (dict events)": [],
                                        "sse-starlette (bytes)": []}
        for _ in range(5):
            runs["toolwire SSEResponse"].append(await _push(SSEResponse(as_bytes())))
            runs["sse-starlette (dict events)"].append(await _push(EventSourceResponse(as_dicts(), ping=3600)))
            runs["sse-starlette (bytes)"].append(await _push(EventSourceResponse(as_bytes(), ping=3600)))
        return runs

    runs = asyncio.run(measure())
    return {name: min(values) * 1e6 for name, values in runs.items()}


def partial_json_figures() -> dict[str, float]:
    import partial_json_parser

    family = next(f for f in FAMILIES if f.name == "qwen25")
    case = argument_case(family, 16)
    start = case.output.index("{")
    end = case.output.rindex("}") + 1
    text = case.output[start:end]
    pieces = [text[i:i + 4] for i in range(0, len(text), 4)]
    started = time.perf_counter()
    so_far = ""
    last: Any = None
    for piece in pieces:
        so_far += piece
        last = partial_json_parser.loads(so_far)
    reparsed = time.perf_counter() - started
    assert last == {"name": "write_file", "arguments": case.expect_args}, "partial-json-parser read another call"
    ours = min(run_toolwire(case).seconds for _ in range(5))
    return {"partial-json-parser, re-parsed per chunk (s)": reparsed, "toolwire streaming core (s)": ours,
            "chunks": float(len(pieces))}


def main() -> None:
    for name, value in sse_figures().items():
        print(f"SSE  {name:30} {value:6.2f} µs per event")
    for name, value in partial_json_figures().items():
        print(f"JSON {name:45} {value:.4f}")


if __name__ == "__main__":
    main()
