"""``n`` answers to one request: one ``Run`` per choice, each with its own parsers, merged.

``start_generation`` opens a backend stream (retrying, bounded, only errors that happen before
anything was generated and are safe to repeat) and waits for its first item, so a failure before
the first byte is still an HTTP error.

A backend that generates ``n`` answers in one request (vLLM: ``native_n``) streams them
interleaved, told apart by ``index``; ``Demux`` splits that one stream into one per choice. Any
other backend is sent ``n`` requests at once (``open_choices``); with a ``seed``, choice ``k`` gets
``seed + k`` so the answers can differ and the request stays reproducible.

``Choices`` hands out the runs' event batches as they come, tagged with the choice they belong to
and, on a choice's last batch, how it ended, or collects them whole (``collect``: after the first
items, one pause of ``BREATHER`` lets a burst gather). Its usage is the sum over the choices (the
prompt counted once).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

from app.backends.base import Backend
from app.backends.generation import Finish, Generation, GenerationRequest, TextDelta, Usage
from app.errors import BackendError
from app.pipeline.plan import Plan
from app.pipeline.run import Finished, Run
from parsers.events import Event

#: seconds a whole answer waits, once, after its first backend item before it reads on: a backend
#: that writes its tokens in a burst is then read in a few large pieces rather than one per write
#: (``bench.whole``, a 16 KB tool call: 1.25–1.36× a streamed answer's CPU before, 0.78–0.94× with it).
#: A stream takes the same pause after its first shown bytes, for its client (``app.pipeline.stream``).
#: uvloop's timers count whole milliseconds.
BREATHER = 0.001


class Demux:
    """One backend stream of ``n`` interleaved answers as ``n`` streams (``stream(k)``). Whichever
    choice's reader needs the next item pulls it from the backend and queues it for its owner; a
    backend failure reaches every reader."""

    def __init__(self, source: Generation, first: TextDelta | Finish, n: int) -> None:
        self.source = source
        self.queues: list[deque[TextDelta | Finish]] = [deque() for _ in range(n)]
        self.lock = asyncio.Lock()
        self.failure: BackendError | None = None
        self.queues[first.index].append(first)

    async def _pull(self) -> None:
        if self.failure is not None:
            raise self.failure
        try:
            item = await self.source.__anext__()
        except StopAsyncIteration:
            self.failure = BackendError(502, "backend stream ended before every choice finished", kind="dropped")
            raise self.failure from None
        except BackendError as exc:
            self.failure = exc
            raise
        self.queues[item.index].append(item)

    async def stream(self, index: int) -> Generation:
        queue = self.queues[index]
        while True:
            while not queue:
                async with self.lock:
                    if not queue:
                        await self._pull()
            item = queue.popleft()
            yield item
            if isinstance(item, Finish):
                return

    async def aclose(self) -> None:
        await self.source.aclose()


async def start_generation(backend: Backend, request: GenerationRequest, retries: int) -> tuple[Any, Generation]:
    """Open the backend stream and wait for its first item; retry (bounded, with backoff) only
    errors that happen before anything was generated and are safe to repeat."""
    delay = 0.2
    for attempt in range(retries + 1):
        stream = backend.generate(request)
        try:
            first = await stream.__anext__()
            return first, stream
        except BackendError as exc:
            await stream.aclose()
            if exc.retryable and attempt < retries:
                await asyncio.sleep(delay)
                delay *= 2
                continue
            raise
        except StopAsyncIteration:
            raise BackendError(502, "backend returned an empty stream", kind="dropped") from None
    raise AssertionError("unreachable")


async def open_choices(backend: Backend, request: GenerationRequest, n: int,
                       retries: int) -> tuple[list[Any], list[Generation], Demux | None]:
    """Start ``n`` answers: the first item and the stream of each (``None`` first items when one
    demultiplexed backend stream carries them all)."""
    if n == 1:
        first, stream = await start_generation(backend, request, retries)
        return [first], [stream], None
    if backend.native_n:
        first, source = await start_generation(backend, replace(request, n=n), retries)
        demux = Demux(source, first, n)
        return [None] * n, [demux.stream(k) for k in range(n)], demux
    seed = request.sampling.seed
    requests = [request if seed is None else replace(request, sampling=replace(request.sampling, seed=seed + k))
                for k in range(n)]
    started = await asyncio.gather(*(start_generation(backend, r, retries) for r in requests), return_exceptions=True)
    failure = next((s for s in started if isinstance(s, BaseException)), None)
    if failure is not None:
        for s in started:
            if not isinstance(s, BaseException):
                await s[1].aclose()
        raise failure
    pairs = [s for s in started if not isinstance(s, BaseException)]
    return [first for first, _ in pairs], [stream for _, stream in pairs], None


class Choices:
    """The runs of one request's answers (see the module docstring)."""

    def __init__(self, runs: list[Run], demux: Demux | None = None, headers: dict[str, str] | None = None) -> None:
        self.runs = runs
        self.demux = demux
        self.headers = headers if headers is not None else {}  # what the answer carries whatever its shape
        self.pumps: list[asyncio.Future[None]] = []  # the tasks reading the runs (``n`` > 1)
        self.closed = False

    @property
    def plan(self) -> Plan:
        return self.runs[0].plan

    def lead(self) -> list[tuple[int, list[Event]]]:
        """The events of each choice's first backend item (when it had arrived with the start)."""
        return [(k, events) for k, run in enumerate(self.runs) if (events := run.lead())]

    async def __aiter__(self) -> AsyncIterator[tuple[int, list[Event], Finished | None]]:
        """``(choice, events, finished)`` as the answers come; ``finished`` is set on a choice's last
        batch. A backend failure in any choice raises ``BackendError``."""
        if len(self.runs) == 1:  # one answer: no tasks in between
            run = self.runs[0]
            async for events in run:
                yield 0, events, run.finished
            return
        queue: asyncio.Queue[tuple[int, list[Event] | None, Finished | BaseException | None]] = \
            asyncio.Queue(maxsize=2 * len(self.runs))

        async def pump(k: int, run: Run) -> None:
            try:
                async for events in run:
                    await queue.put((k, events, run.finished))
            except BackendError as exc:
                await queue.put((k, None, exc))
                return
            await queue.put((k, None, None))

        self.pumps = [asyncio.ensure_future(pump(k, run)) for k, run in enumerate(self.runs)]
        try:
            running = len(self.pumps)
            while running:
                k, batch, status = await queue.get()
                if isinstance(status, BaseException):
                    raise status
                if batch is None:
                    running -= 1
                    continue
                yield k, batch, status
        finally:
            await self._stop_pumps()

    async def _stop_pumps(self) -> None:
        pumps, self.pumps = self.pumps, []
        for task in pumps:
            task.cancel()
        if pumps:
            await asyncio.gather(*pumps, return_exceptions=True)

    async def collect(self) -> list[tuple[list[Event], Finished]]:
        """Every choice's events and how it ended (the runs are closed afterwards)."""
        events: list[list[Event]] = [[] for _ in self.runs]
        try:
            for k, lead in self.lead():
                events[k] += lead
            if any(run.finished is None for run in self.runs):  # (``BREATHER``)
                await asyncio.sleep(BREATHER)
            async for k, batch, _ in self:
                events[k] += batch
        finally:
            await self.aclose()
        return [(e, run.finished) for e, run in zip(events, self.runs, strict=True) if run.finished is not None]

    def total(self) -> Finished:
        """The request's totals once every choice finished: completion and reasoning tokens summed,
        the prompt (and its cached part) counted once. One answer's totals are its own."""
        if len(self.runs) == 1 and self.runs[0].finished is not None:
            return self.runs[0].finished
        finished = [run.finished for run in self.runs if run.finished is not None]
        usages = [f.usage for f in finished if f.usage is not None]
        usage = None
        if usages:
            usage = Usage(usages[0].prompt_tokens, sum(u.completion_tokens for u in usages), usages[0].cached_tokens)
        return Finished(finished[0].reason if finished else "stop", usage, sum(f.calls for f in finished),
                        sum(f.unfinished for f in finished), None, sum(f.reasoning_tokens for f in finished))

    async def aclose(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            await self._stop_pumps()  # a run's stream is closed only once nothing is reading it
            for run in self.runs:
                await run.aclose()
        finally:
            if self.demux is not None:
                await self.demux.aclose()
