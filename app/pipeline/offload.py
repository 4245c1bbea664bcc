"""CPU-heavy request work (tool-schema checks, chat-template rendering) kept off the event loop,
and bounded.

A request is *light* when it is small (few turns, little text, few tools): its checks and render
run inline, since handing them to a thread would cost more than they do. A heavy one runs in a
small thread pool, and the loop keeps serving meanwhile. Its result is awaited for at most
``--max-render-ms``: past that the request is answered 400. Python cannot stop a thread, so the
abandoned work runs to its end in the pool; to keep abandoned work from piling up, at most
``max_jobs`` heavy jobs may be under way (running or abandoned) — beyond that a request is answered
503 with ``Retry-After`` until one finishes. (Threads share the interpreter lock, so heavy work
still takes slices of the loop's time; it no longer takes the loop.)
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from app.errors import APIError, bad_request
from app.pipeline.ask import Ask

T = TypeVar("T")

#: beyond any of these a request is heavy (each bounds what inline work can cost)
LIGHT_TURNS = 64
LIGHT_CHARS = 32_768
LIGHT_TOOLS = 32


def is_light(ask: Ask) -> bool:
    """Whether ``ask`` is small enough to check and render on the loop."""
    if len(ask.turns) > LIGHT_TURNS or len(ask.tools) > LIGHT_TOOLS:
        return False
    chars = 0
    for turn in ask.turns:
        chars += len(turn.text)
        for call in turn.calls:
            chars += len(call.arguments) if isinstance(call.arguments, str) else 1024
    return chars <= LIGHT_CHARS


class Offloader:
    """See the module docstring."""

    def __init__(self, workers: int, deadline_s: float, max_jobs: int) -> None:
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="toolwire-prepare")
        self.deadline_s = deadline_s
        self.max_jobs = max_jobs
        self.jobs = 0  # heavy jobs under way, abandoned ones included

    async def run(self, light: bool, fn: Callable[..., T], *args: Any) -> T:
        if light:
            return fn(*args)
        if self.jobs >= self.max_jobs:
            raise APIError(503, "the server is busy preparing other large requests; retry shortly", "server_error",
                           code="server_busy", headers={"Retry-After": "1"})
        loop = asyncio.get_running_loop()
        self.jobs += 1
        future = self._pool.submit(fn, *args)

        def finished(_: object) -> None:
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile (shutdown): nothing to count
                loop.call_soon_threadsafe(self._finished)

        future.add_done_callback(finished)
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), self.deadline_s)
        except TimeoutError:
            raise bad_request(f"preparing this request (checking its tools, rendering the chat template) took "
                              f"longer than {self.deadline_s * 1000:.0f} ms (--max-render-ms): shorten the "
                              "conversation or the tools", code="request_too_complex") from None

    def _finished(self) -> None:
        self.jobs -= 1

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
