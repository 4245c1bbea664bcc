"""The SSE body of a streamed answer, for any face: the ``Choices``' events through the face's encoder.

An ``Encoder`` turns events into its wire format's bytes: ``head()`` (what opens the stream: the
role chunk, ``response.created``, ``message_start`` — sent with the first text, so the first token
leaves in one write), ``events(index, batch)`` (a batch of one choice's events), ``end_choice(index,
finished)`` (what closes one choice), ``await end(total)`` (what closes the stream once every choice
has; it may do I/O first, e.g. store the answer, and chooses its closing bytes by how that went),
and ``error(exc)`` (a failure after the first byte).

``AnswerStream`` owns the lifecycle: ``lead()`` encodes what the first backend items hold,
iteration yields the rest, and ``aclose()`` — run however the stream ends, iterated or not — closes
the upstream requests, ends the stream in the metrics and gives back the request's concurrency
slot (``release``, handed over by the request's lease).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from typing import Protocol

from app.errors import APIError, BackendError
from app.metrics import Metrics
from app.pipeline.choices import Choices
from app.pipeline.run import Finished
from parsers.events import Event

log = logging.getLogger("toolwire")


class Encoder(Protocol):
    def head(self) -> bytes: ...

    def events(self, index: int, events: list[Event]) -> bytes: ...

    def end_choice(self, index: int, finished: Finished) -> bytes: ...

    async def end(self, total: Finished) -> bytes: ...

    def error(self, exc: APIError) -> bytes: ...


SHUTTING_DOWN = APIError(503, "the server is shutting down; retry the request", "server_error",
                         code="server_shutting_down")


class AnswerStream:
    """See the module docstring."""

    def __init__(self, choices: Choices, encoder: Encoder, metrics: Metrics, release: Callable[[], None]) -> None:
        self.choices = choices
        self.encoder = encoder
        self.metrics = metrics
        self.release = release
        self.opening = encoder.head()  # sent with the first text (one write instead of two)
        self.closed = False
        metrics.active_streams.inc()

    def _opened(self, data: bytes) -> bytes:
        if self.opening:  # the opening goes out with the first text, whatever the parser holds back
            data, self.opening = self.opening + data, b""
        return data

    def lead(self) -> bytes:
        """What the first backend items give, opening included."""
        encoder = self.encoder
        return self._opened(b"".join(encoder.events(k, events) for k, events in self.choices.lead()))

    async def __aiter__(self) -> AsyncIterator[bytes]:
        encoder = self.encoder
        running = len(self.choices.runs)
        try:
            async for index, events, finished in self.choices:
                data = encoder.events(index, events)
                if finished is not None:
                    data += encoder.end_choice(index, finished)
                    running -= 1
                    if not running:  # the last choice's end and the stream's end leave in one write
                        data += await encoder.end(self.choices.total())
                if data:
                    yield self._opened(data)
        except BackendError as exc:
            log.warning("backend failed mid-stream: %s", exc.message)
            yield self._failed(exc)
        finally:
            await self.aclose()

    def _failed(self, exc: APIError) -> bytes:
        data = self.opening + self.encoder.error(exc)
        self.opening = b""
        return data

    def interrupted(self) -> bytes:
        """The closing bytes of a stream the server cuts (shutdown): the face's error event."""
        return self._failed(SHUTTING_DOWN)

    async def aclose(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            self.metrics.active_streams.dec()
            await self.choices.aclose()
        finally:
            self.release()
