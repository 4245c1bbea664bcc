"""What-if changes to the app, applied *in the benchmark's toolwire process only* (monkeypatching;
no file under ``app/`` is modified), so a proposed app-side change can be measured before anyone
writes it for real. ``bench.proxy_main --experiment NAME`` applies one; ``bench.proxy`` measures
toolwire with and without them, side by side.

* ``trace`` — a diagnostic, not a change: records where each chat request's time to the response
  head goes.
* ``slice100`` — not a patch: toolwire run with its own ``--sched-slice-us 100`` setting (opt-in;
  see ``app.sched``), to show what the setting does on this machine.
* ``no_head_hold`` — a response head written as uvicorn writes it, on its own, not held back to
  leave with the first body bytes (``app.api.http_protocol.HeadWithBody``): what that hook is worth.

The first what-ifs measured here (a lean streaming HTTP client instead of httpx for the backend
stream; a plain SSE response instead of sse-starlette's; the backend stream's first chunk handed on
before the rest of its read is de-chunked) were adopted into ``app/``.

An experiment that no longer fits the app's code raises ``ExperimentError`` (reported, not hidden).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class ExperimentError(RuntimeError):
    pass


EXPERIMENTS: dict[str, Callable[[], None]] = {}


def apply(name: str) -> None:
    try:
        EXPERIMENTS[name]()
    except KeyError:
        raise ExperimentError(f"unknown experiment {name!r}; known: {', '.join(EXPERIMENTS)}") from None


# ---------------------------------------------------------------------- trace (a diagnostic, not a change)


def _apply_trace() -> None:
    """Record, per chat request, where the time to the response head goes; written as JSON to
    ``$BENCH_TRACE`` at exit."""
    import atexit
    import json
    import os
    import time

    from app.api import answer, server
    from app.api.chat import routes as chat
    from app.pipeline import choices, plan

    marks: list[dict[str, float]] = []
    current: dict[str, float] = {}
    clock = time.perf_counter
    original_call = server.EdgeMiddleware.__call__

    async def edge_call(self: Any, scope: Any, receive: Any, send: Any) -> None:
        if scope.get("type") != "http" or scope.get("path") != "/v1/chat/completions":
            return await original_call(self, scope, receive, send)
        current.clear()
        current["entry"] = clock()

        async def traced_send(message: Any) -> None:
            if message["type"] == "http.response.start":
                current["head"] = clock()
            elif message["type"] == "http.response.body" and "first_body" not in current:
                current["first_body"] = clock()
            await send(message)

        await original_call(self, scope, receive, traced_send)
        current["done"] = clock()
        marks.append(dict(current))

    server.EdgeMiddleware.__call__ = edge_call  # type: ignore[method-assign]
    # (where the name is looked up, its name, the mark): validation, planning, building the parsers
    for module, name in ((chat, "parse_request"), (answer, "plan_request"), (plan.Plan, "parser")):
        fn = getattr(module, name)

        def timed(*args: Any, __fn: Any = fn, __name: str = name, **kwargs: Any) -> Any:
            current[__name + "_start"] = clock()
            try:
                return __fn(*args, **kwargs)
            finally:
                current[__name + "_end"] = clock()

        setattr(module, name, timed)
    original_start = choices.start_generation  # looked up there when the answers are opened

    async def start_generation(*args: Any, **kwargs: Any) -> Any:
        current["start_generation_start"] = clock()
        try:
            return await original_start(*args, **kwargs)
        finally:
            current["start_generation_end"] = clock()

    choices.start_generation = start_generation

    from app.backends import streamhttp

    original_post = streamhttp.StreamingClient.post
    original_read = streamhttp.StreamedResponse._read

    async def post(self: Any, *args: Any, **kwargs: Any) -> Any:
        current.setdefault("backend_post_start", clock())
        try:
            return await original_post(self, *args, **kwargs)
        finally:
            current.setdefault("backend_head", clock())

    async def read(self: Any) -> bytes:
        data = await original_read(self)
        current.setdefault("backend_first_data", clock())
        return data

    original_connect = streamhttp.StreamingClient._connect

    async def connect(self: Any, *args: Any, **kwargs: Any) -> Any:
        current["backend_connect"] = clock()
        return await original_connect(self, *args, **kwargs)

    streamhttp.StreamingClient._connect = connect  # type: ignore[method-assign]
    streamhttp.StreamingClient.post = post  # type: ignore[method-assign]
    streamhttp.StreamedResponse._read = read  # type: ignore[method-assign]

    def dump() -> None:
        path = os.environ.get("BENCH_TRACE")
        if path:
            with open(path, "w") as f:
                json.dump(marks, f)

    atexit.register(dump)


EXPERIMENTS["trace"] = _apply_trace


def _apply_slice100() -> None:
    import os

    os.environ["TOOLWIRE_SCHED_SLICE_US"] = "100"  # read by Settings in bench.proxy_main


EXPERIMENTS["slice100"] = _apply_slice100


def _apply_no_head_hold() -> None:
    from app.api import http_protocol

    def write(self: Any, data: Any) -> None:
        self._transport.write(data)

    if not hasattr(http_protocol, "HeadWithBody"):
        raise ExperimentError("app.api.http_protocol has no HeadWithBody")
    http_protocol.HeadWithBody.write = write  # type: ignore[method-assign]


EXPERIMENTS["no_head_hold"] = _apply_no_head_hold
