"""The SSE body of one streamed answer, for any face: a ``Run``'s events through the face's encoder.

An ``Encoder`` turns events into its wire format's bytes: ``head()`` (what opens the stream:
the role chunk, ``response.created``, ``message_start`` — sent with the first text, so the first
token leaves in one write), ``events(batch)``, ``finish(finished)`` (the closing events) and
``error(exc)`` (a failure after the first byte); an encoder may also have an async ``persist()``,
awaited after ``finish`` and before the closing bytes are sent. ``EventStream`` owns the lifecycle: ``lead()``
encodes what the first backend item holds, iteration yields the rest, and ``aclose()`` — run
however the stream ends, iterated or not — closes the upstream request, gives back the concurrency
slot and ends the stream in the metrics.

``ChoiceStream`` is the same for a face that streams ``n`` answers side by side (Chat Completions):
its ``ChoicesEncoder`` is told which choice each batch belongs to, closes each choice as it ends
and the stream once all have.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from typing import Protocol

from app.errors import APIError, BackendError
from app.metrics import Metrics
from app.pipeline.choices import Choices
from app.pipeline.run import Finished, Run
from parsers.events import Event

log = logging.getLogger("toolwire")


class Encoder(Protocol):
    def head(self) -> bytes: ...

    def events(self, events: list[Event]) -> bytes: ...

    def finish(self, finished: Finished) -> bytes: ...

    def error(self, exc: APIError) -> bytes: ...


class ChoicesEncoder(Protocol):
    def head(self) -> bytes: ...

    def events(self, index: int, events: list[Event]) -> bytes: ...

    def finish_choice(self, index: int, finished: Finished) -> bytes: ...

    def finish(self, total: Finished) -> bytes: ...

    def error(self, exc: APIError) -> bytes: ...


class _Lifecycle:
    """What every streamed body shares: the opening sent with the first text, the error event, and
    closing exactly once (upstream request, metrics, concurrency slot)."""

    def __init__(self, source: Run | Choices, encoder: Encoder | ChoicesEncoder, metrics: Metrics,
                 release: Callable[[], None]) -> None:
        self.source = source
        self.metrics = metrics
        self.release = release
        self._error = encoder.error
        self.opening = encoder.head()  # sent with the first text (one write instead of two)
        self.closed = False
        metrics.active_streams.inc()

    def _opened(self, data: bytes) -> bytes:
        if self.opening:  # the opening goes out with the first text, whatever the parser holds back
            data, self.opening = self.opening + data, b""
        return data

    def failed(self, exc: BackendError) -> bytes:
        log.warning("backend failed mid-stream: %s", exc.message)
        data = self.opening + self._error(exc)
        self.opening = b""
        return data

    def interrupted(self) -> bytes:
        """The closing bytes of a stream the server cuts (shutdown): the face's error event."""
        data = self.opening + self._error(APIError(503, "the server is shutting down; retry the request",
                                                   "server_error", code="server_shutting_down"))
        self.opening = b""
        return data

    async def aclose(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            self.metrics.active_streams.dec()
            await self.source.aclose()
        finally:
            self.release()


class EventStream(_Lifecycle):
    """See the module docstring."""

    def __init__(self, run: Run, encoder: Encoder, metrics: Metrics, release: Callable[[], None]) -> None:
        super().__init__(run, encoder, metrics, release)
        self.run = run
        self.encoder = encoder

    def _encode(self, events: list[Event]) -> bytes:
        return self._opened(self.encoder.events(events))

    def lead(self) -> bytes:
        """What the first backend item gives, opening included."""
        return self._encode(self.run.lead())

    async def __aiter__(self) -> AsyncIterator[bytes]:
        run = self.run
        try:
            async for events in run:
                if run.finished is not None:
                    tail = self._encode(events) + self.encoder.finish(run.finished)
                    persist = getattr(self.encoder, "persist", None)
                    if persist is not None:  # e.g. a stored response: saved before its last event leaves
                        await persist()
                    yield tail
                    return
                data = self._encode(events)
                if data:
                    yield data
        except BackendError as exc:
            yield self.failed(exc)
        finally:
            await self.aclose()


class ChoiceStream(_Lifecycle):
    """``n`` answers as one stream (see the module docstring)."""

    def __init__(self, choices: Choices, encoder: ChoicesEncoder, metrics: Metrics,
                 release: Callable[[], None]) -> None:
        super().__init__(choices, encoder, metrics, release)
        self.choices = choices
        self.encoder = encoder

    def lead(self) -> bytes:
        """What the first backend items give, opening included."""
        return self._opened(b"".join(self.encoder.events(k, events) for k, events in self.choices.lead()))

    async def __aiter__(self) -> AsyncIterator[bytes]:
        encoder = self.encoder
        running = len(self.choices.runs)
        try:
            async for index, events, finished in self.choices:
                data = encoder.events(index, events)
                if finished is not None:
                    data += encoder.finish_choice(index, finished)
                    running -= 1
                    if not running:  # the last choice's end, the usage and [DONE] leave in one write
                        data += encoder.finish(self.choices.total())
                if data:
                    yield self._opened(data)
        except BackendError as exc:
            yield self.failed(exc)
        finally:
            await self.aclose()
