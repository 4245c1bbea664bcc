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

Once the first bytes that show the client something (text, reasoning, a tool call — not the
opening alone) have left, the stream pauses ``BREATHER`` seconds before it reads on, once per
stream. A client that shares toolwire's CPUs (an agent beside its proxy and model server) is woken
by that write, but the kernel may queue it behind a backend writing a burst of tokens, and
toolwire parsing that burst keeps the other CPU busy: the client then read its first token only
when the burst was over (~1–2 ms on 2 CPUs). The pause lets the CPU go idle so the client runs
first. It costs nothing when the backend has not sent more yet (a model pacing its tokens), and
at most ``BREATHER`` for the rest of a burst; other streams go on meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from typing import Protocol

from app.errors import APIError, BackendError
from app.metrics import Metrics
from app.pipeline.choices import BREATHER, Choices  # (the pause: see the module docstring)
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
        self.breathed = False  # the pause after the first bytes that show something was taken
        self.pending_breath = False  # the lead showed something: pause before reading on
        self.closed = False
        metrics.active_streams.inc()

    def _opened(self, data: bytes) -> bytes:
        if self.opening:  # the opening goes out with the first text, whatever the parser holds back
            data, self.opening = self.opening + data, b""
        return data

    def lead(self) -> bytes:
        """What the first backend items give, opening included."""
        encoder = self.encoder
        shown = b"".join(encoder.events(k, events) for k, events in self.choices.lead())
        self.pending_breath = bool(shown)
        return self._opened(shown)

    async def __aiter__(self) -> AsyncIterator[bytes]:
        encoder = self.encoder
        running = len(self.choices.runs)
        try:
            if self.pending_breath:
                await self._breathe()
            async for index, events, finished in self.choices:
                data = encoder.events(index, events)
                shown = bool(data)
                if finished is not None:
                    data += encoder.end_choice(index, finished)
                    running -= 1
                    if not running:  # the last choice's end and the stream's end leave in one write
                        data += await encoder.end(self.choices.total())
                if data:
                    yield self._opened(data)
                    if shown and running and not self.breathed:
                        await self._breathe()
        except BackendError as exc:
            log.warning("backend failed mid-stream: %s", exc.message)
            yield self._failed(exc)
        finally:
            await self.aclose()

    async def _breathe(self) -> None:
        """The pause after the first bytes that showed something (module docstring), once."""
        self.breathed = True
        self.pending_breath = False
        await asyncio.sleep(BREATHER)

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
