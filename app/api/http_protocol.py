"""uvicorn's HTTP/1.1 protocol (httptools), with bounds on a request's head — a deadline for its
headers, a size and a header count — and response heads that leave with the body's first bytes.

This subclasses uvicorn's ``HttpToolsProtocol`` (not a public API: ``pyproject.toml`` bounds
uvicorn to the versions tested, and ``tests/app/api/test_hook_contracts.py`` fails when what this
relies on changes — the callbacks it extends, ``self.transport`` / ``self.loop`` / ``self.logger``,
a response head written alone and first). uvicorn offers none of these bounds for httptools.

* **Header deadline** (slowloris). uvicorn closes idle keep-alive connections, but not one that
  sends its request line and headers a byte at a time. Here a connection must complete a request's
  headers within ``header_timeout`` seconds of opening (or of the request's first byte, on a
  kept-alive connection), or it is closed. The body has its own deadline in
  ``app.api.server.read_json``.
* **Head size and header count.** httptools buffers a header until it ends, so a 64 MB header was
  read whole (and its memory kept), and 5000 headers were answered. Here the bytes of a head are
  counted as they arrive, before the parser sees them: past ``max_header_bytes`` (request line and
  headers) or ``max_headers`` header lines the connection gets a 431 (an OpenAI-shaped error: the
  head is not complete, so no route is known) and is closed, having held at most one read beyond
  the bound.
* **Head with body.** uvicorn writes a response's head as soon as the app starts the response, and
  its body in writes of its own: two packets, and a client that wakes up for the head only to wait
  for the body (a streamed answer's first token). ``HeadWithBody`` holds the head back until the
  next write, which it joins, or until the event loop's current pass ends.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

#: what every response head uvicorn writes begins with (its status lines)
_HEAD = b"HTTP/1.1 "
HEADER_TIMEOUT = 10.0
MAX_HEADER_BYTES = 64 * 1024
MAX_HEADERS = 100
_END = b"\r\n\r\n"


def protocol(header_timeout: float = HEADER_TIMEOUT, max_header_bytes: int = MAX_HEADER_BYTES,
             max_headers: int = MAX_HEADERS) -> type[HttpToolsProtocol]:
    """The protocol class with these bounds. uvicorn takes a class, and hands it to worker
    processes by reference, so the bounds are the class's (each worker's app factory sets them
    again from the settings)."""
    BoundedHeadProtocol.header_timeout = header_timeout
    BoundedHeadProtocol.max_header_bytes = max_header_bytes
    BoundedHeadProtocol.max_headers = max_headers
    return BoundedHeadProtocol


def _refusal(status: int, reason: str, message: str, code: str) -> bytes:
    body = orjson.dumps({"error": {"message": message, "type": "invalid_request_error", "param": None,
                                   "code": code}})
    return (f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\n\r\n").encode("latin-1") + body


class BoundedHeadProtocol(HttpToolsProtocol):
    header_timeout: float = HEADER_TIMEOUT
    max_header_bytes: int = MAX_HEADER_BYTES
    max_headers: int = MAX_HEADERS

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.transport = HeadWithBody(transport, self.loop)
        self._in_head = True  # between requests, or inside a head: the bytes that arrive are counted
        self._head_bytes = 0
        self._head_lines = 0
        self._tail = b""  # the last 3 bytes counted: a head's end may straddle two reads
        self._arm()

    def data_received(self, data: bytes) -> None:
        if self._in_head and not self._within_bounds(data):
            return
        super().data_received(data)

    def _within_bounds(self, data: bytes) -> bool:
        """Count the head's part of ``data``; past a bound, answer 431, close, and say so."""
        seen = self._tail + data
        end = seen.find(_END)
        part = data if end < 0 else data[:max(0, end + len(_END) - len(self._tail))]
        self._head_bytes += len(part)
        self._head_lines += part.count(b"\n")
        self._tail = seen[-3:]
        # lines: the request line, the headers, and (once the head is complete) the empty line
        headers = self._head_lines - (2 if end >= 0 else 1)
        if self._head_bytes <= self.max_header_bytes and headers <= self.max_headers:
            return True
        self._disarm()
        message = (f"the request's head is larger than {self.max_header_bytes} bytes"
                   if self._head_bytes > self.max_header_bytes
                   else f"the request has more than {self.max_headers} headers")
        self.logger.info("refused a request head: %s", message)
        self._in_head = False
        self.transport.write(_refusal(431, "Request Header Fields Too Large", message,
                                      "request_header_fields_too_large"))
        self.transport.close()
        return False

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
        self._in_head = False
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._in_head, self._head_bytes, self._head_lines, self._tail = True, 0, 0, b""

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
