"""uvicorn's HTTP/1.1 protocol (httptools), with a deadline for a request's headers.

uvicorn closes idle keep-alive connections, but not one that sends its request line and headers a
byte at a time (slowloris): each such connection would stay open for good. Here a connection must
complete a request's headers within ``header_timeout`` seconds of opening (or of the request's
first byte, on a kept-alive connection), or it is closed. The body has its own deadline in
``app.api.server.read_json``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

HEADER_TIMEOUT = 10.0


def with_header_timeout(seconds: float) -> type[HttpToolsProtocol]:
    """The protocol class, with ``seconds`` as its header deadline. uvicorn takes a class, and hands
    it to worker processes by reference, so the deadline is the class's (each worker's app factory
    sets it again from the settings)."""
    HeaderDeadlineProtocol.header_timeout = seconds
    return HeaderDeadlineProtocol


class HeaderDeadlineProtocol(HttpToolsProtocol):
    header_timeout: float = HEADER_TIMEOUT

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def _arm(self) -> None:
        self._header_deadline: Any = self.loop.call_later(self.header_timeout, self._too_slow)

    def _disarm(self) -> None:
        deadline = getattr(self, "_header_deadline", None)
        if deadline is not None:
            deadline.cancel()
            self._header_deadline = None

    def _too_slow(self) -> None:
        self._header_deadline = None
        self.logger.info("closing a connection that did not send its request headers in %.0f s", self.header_timeout)
        self.transport.close()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if getattr(self, "_header_deadline", None) is None:
            self._arm()

    def on_headers_complete(self) -> None:
        self._disarm()
        super().on_headers_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)
