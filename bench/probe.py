"""A latency probe in its own process: ``GET <path>`` over one keep-alive connection, one request
at a time, every ``--interval-ms``, until SIGTERM; then it prints one JSON line — a list of
``[sent_at, seconds]`` pairs, ``sent_at`` on the system's monotonic clock (``time.monotonic()`` of
any process on the machine reads the same clock on Linux, so the caller can cut the list into
phases by its own timestamps).

    python -m bench.probe --port PORT [--path /v1/models] [--interval-ms 10]

Its own process, so the GIL of the benchmark's client never delays it. Standard library only.
"""

from __future__ import annotations

import argparse
import json
import signal
import socket
import sys
import time
from typing import Any


def _read_response(sock: socket.socket, buffer: bytearray) -> None:
    """Read one HTTP/1.1 response with a Content-Length (what ``/v1/models`` sends) off ``sock``."""
    while b"\r\n\r\n" not in buffer:
        data = sock.recv(65536)
        if not data:
            raise ConnectionError("closed")
        buffer += data
    head, _, rest = bytes(buffer).partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(rest) < length:
        data = sock.recv(65536)
        if not data:
            raise ConnectionError("closed")
        rest += data
    buffer[:] = rest[length:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--path", default="/v1/models")
    parser.add_argument("--interval-ms", type=float, default=10.0)
    args = parser.parse_args(argv)
    samples: list[list[float]] = []
    running = True

    def stop(_signum: int, _frame: Any) -> None:
        nonlocal running
        running = False

    signal.signal(signal.SIGTERM, stop)
    request = f"GET {args.path} HTTP/1.1\r\nHost: probe\r\n\r\n".encode()
    sock: socket.socket | None = None
    buffer = bytearray()
    print("READY", flush=True)
    while running:
        try:
            if sock is None:
                sock = socket.create_connection(("127.0.0.1", args.port))
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                buffer.clear()
            sent = time.monotonic()
            sock.sendall(request)
            _read_response(sock, buffer)
            samples.append([sent, time.monotonic() - sent])
        except (OSError, ConnectionError):
            if sock is not None:
                sock.close()
            sock = None
        time.sleep(args.interval_ms / 1000)
    print(json.dumps(samples), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
