"""uvicorn's HTTP/1.1 protocol (httptools), with a deadline for a request's headers, and response
heads that leave with the body's first bytes.

uvicorn closes idle keep-alive connections, but not one that sends its request line and headers a
byte at a time (slowloris): each such connection would stay open for good. Here a connection must
complete a request's headers within ``header_timeout`` seconds of opening (or of the request's
first byte, on a kept-alive connection), or it is closed. The body has its own deadline in
``app.api.server.read_json``.

uvicorn writes a response's head as soon as the app starts the response, and its body in writes
of its own: two packets, and a client that wakes up for the head only to wait for the body (a
streamed answer's first token). ``HeadWithBody`` holds the head back until the next write, which
it joins, or until the event loop's current pass ends (a head with no body ready leaves then).

A connection's two addresses (the ASGI scope's ``server`` and ``client``) are read from the
transport's own extra info (``sockname``, ``peername``), not through a socket object made for the
purpose as uvicorn does: the same values (a test compares them, TCP over IPv4 and IPv6 and a Unix
socket), at a sixth of the cost, before each connection's first byte is read.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.logging import TRACE_LOG_LEVEL
from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.protocols.utils import is_ssl

#: what every response head uvicorn writes begins with (its status lines)
_HEAD = b"HTTP/1.1 "
HEADER_TIMEOUT = 10.0


def with_header_timeout(seconds: float) -> type[HttpToolsProtocol]:
    """The protocol class, with ``seconds`` as its header deadline. uvicorn takes a class, and hands
    it to worker processes by reference, so the deadline is the class's (each worker's app factory
    sets it again from the settings)."""
    HeaderDeadlineProtocol.header_timeout = seconds
    return HeaderDeadlineProtocol


def local_address(transport: asyncio.BaseTransport) -> tuple[str, int | None] | None:
    """Where a connection arrived, as uvicorn gives it: ``(host, port)``, ``(path, None)`` for a
    Unix socket, else ``None``."""
    info = transport.get_extra_info("sockname")
    if isinstance(info, tuple) and len(info) >= 2:
        return str(info[0]), int(info[1])
    return (info, None) if isinstance(info, str) else None


def remote_address(transport: asyncio.BaseTransport) -> tuple[str, int] | None:
    """Who connected, as uvicorn gives it: ``(host, port)``, else ``None`` (a Unix socket's peer)."""
    info = transport.get_extra_info("peername")
    return (str(info[0]), int(info[1])) if isinstance(info, tuple) and len(info) >= 2 else None


class HeaderDeadlineProtocol(HttpToolsProtocol):
    header_timeout: float = HEADER_TIMEOUT

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        # uvicorn's own set-up, the addresses aside (see the module docstring)
        self.connections.add(self)
        self.transport = transport
        self.flow = FlowControl(transport)
        self.server = local_address(transport)
        self.client = remote_address(transport)
        self.scheme = "https" if is_ssl(transport) else "http"
        if self.logger.level <= TRACE_LOG_LEVEL:
            prefix = f"{self.client[0]}:{self.client[1]} - " if self.client else ""
            self.logger.log(TRACE_LOG_LEVEL, "%sHTTP connection made", prefix)
        self.transport = HeadWithBody(transport, self.loop)
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


class HeadWithBody(asyncio.Transport):
    """A transport whose response heads wait for the first bytes after them (see the module
    docstring). Bytes leave in the order written; a held head leaves at the latest when the loop's
    current pass ends, or before the connection is closed."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__()
        self._transport = transport
        self._loop = loop
        self._held = b""

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._held:
            data, self._held = self._held + data, b""
        elif data[:len(_HEAD)] == _HEAD:
            self._held = bytes(data)
            self._loop.call_soon(self._flush)
            return
        self._transport.write(data)

    def writelines(self, list_of_data: Any) -> None:
        self.write(b"".join(list_of_data))

    def _flush(self) -> None:
        if self._held:
            held, self._held = self._held, b""
            if not self._transport.is_closing():
                self._transport.write(held)

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def abort(self) -> None:
        self._held = b""
        self._transport.abort()

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._transport.get_extra_info(name, default)

    def pause_reading(self) -> None:
        self._transport.pause_reading()

    def resume_reading(self) -> None:
        self._transport.resume_reading()

    def is_reading(self) -> bool:
        return self._transport.is_reading()

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._transport.set_protocol(protocol)

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._transport.get_protocol()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._transport.set_write_buffer_limits(high, low)

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + len(self._held)

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self._transport.get_write_buffer_limits()

    def can_write_eof(self) -> bool:
        return self._transport.can_write_eof()

    def write_eof(self) -> None:
        self._flush()
        self._transport.write_eof()
