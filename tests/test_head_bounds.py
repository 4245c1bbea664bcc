"""A request's head is bounded (issue 38, item 3): past ``--max-header-bytes`` (request line and
headers) or ``--max-headers`` a connection gets a 431 and is closed, with no key, on any path —
tested from outside, over raw sockets, against the app on a real port. The server holds at most
about one read past the bound, so a flood of huge heads leaves its memory where it was."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator

import pytest

from tests.proxy_server import ProxyServer

MAX_BYTES = 16 * 1024
MAX_HEADERS = 20


@pytest.fixture(scope="module")
def proxy() -> Iterator[ProxyServer]:
    # the backend is never asked: every request here is refused at the head, or asks /livez
    server = ProxyServer(backend="http://127.0.0.1:9", api_key=["k1"], max_header_bytes=MAX_BYTES,
                         max_headers=MAX_HEADERS).start()
    yield server
    server.stop()


def head(path: str = "/livez", headers: int = 0, value_bytes: int = 8, method: str = "GET") -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: x"]
    lines += [f"X-H{i}: {'v' * value_bytes}" for i in range(headers)]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def exchange(proxy: ProxyServer, data: bytes, piece: int | None = None) -> bytes:
    """Send ``data`` (in pieces of ``piece`` bytes, or at once) and read until the server closes
    or a response head and its body have come; a server that closes mid-send is fine."""
    with socket.create_connection(("127.0.0.1", proxy.settings.port), timeout=20) as sock:
        try:
            if piece is None:
                sock.sendall(data)
            else:
                for at in range(0, len(data), piece):
                    sock.sendall(data[at:at + piece])
        except OSError:
            pass  # refused and closed while we were still sending
        return read_response(sock)


def read_response(sock: socket.socket) -> bytes:
    got = b""
    while True:
        try:
            data = sock.recv(65536)
        except OSError:
            return got
        if not data:
            return got
        got += data
        top, sep, body = got.partition(b"\r\n\r\n")
        length = next((int(line.split(b":")[1]) for line in top.split(b"\r\n")
                       if line.lower().startswith(b"content-length:")), None)
        if sep and length is not None and len(body) >= length:
            return got


def status(response: bytes) -> int:
    return int(response.split(b" ", 2)[1]) if response else 0


def test_heads_within_the_bounds_are_served(proxy: ProxyServer) -> None:
    assert status(exchange(proxy, head(headers=MAX_HEADERS - 1))) == 200  # with Host: MAX_HEADERS headers
    assert status(exchange(proxy, head(headers=1, value_bytes=MAX_BYTES - 200))) == 200
    # the same, a byte at a time: a head's end straddling reads is found
    assert status(exchange(proxy, head(headers=MAX_HEADERS - 1), piece=1)) == 200


def test_too_many_headers_get_a_431(proxy: ProxyServer) -> None:
    response = exchange(proxy, head(headers=MAX_HEADERS))
    assert status(response) == 431
    body = json.loads(response.partition(b"\r\n\r\n")[2])
    assert body["error"]["code"] == "request_header_fields_too_large"
    assert status(exchange(proxy, head(headers=MAX_HEADERS), piece=1)) == 431
    assert status(exchange(proxy, head(headers=5000))) == 431


def test_a_too_large_head_gets_a_431_on_any_path_without_a_key(proxy: ProxyServer) -> None:
    for path in ("/livez", "/v1/chat/completions", "/nowhere"):
        assert status(exchange(proxy, head(path, headers=1, value_bytes=MAX_BYTES), piece=4096)) == 431, path
    big_url = head("/livez?q=" + "a" * MAX_BYTES)
    assert status(exchange(proxy, big_url)) == 431


def test_a_kept_alive_connection_bounds_each_head(proxy: ProxyServer) -> None:
    """The count starts again with each request: two heads just within the bound on one connection
    are both served, and a third past it is refused."""
    with socket.create_connection(("127.0.0.1", proxy.settings.port), timeout=20) as sock:
        for _ in range(2):
            sock.sendall(head(headers=MAX_HEADERS - 1, value_bytes=(MAX_BYTES // MAX_HEADERS) - 40))
            assert status(read_response(sock)) == 200
        sock.sendall(head(headers=MAX_HEADERS))
        assert status(read_response(sock)) == 431


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024


def test_huge_heads_leave_memory_where_it_was(proxy: ProxyServer) -> None:
    """Four connections each sending a 100 MB header (the server runs in this process): every one
    is answered 431 as soon as the bound is passed, and the process's memory does not grow by the
    heads' size."""
    before = rss_mb()
    chunk = b"v" * (1 << 20)
    results: list[int] = []

    def flood() -> None:
        with socket.create_connection(("127.0.0.1", proxy.settings.port), timeout=20) as sock:
            sent = 0
            try:
                sock.sendall(b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Big: ")
                while sent < 100 << 20:
                    sock.sendall(chunk)
                    sent += len(chunk)
            except OSError:
                pass
            results.append(status(read_response(sock)))
            assert sent < 100 << 20  # cut off long before the 100 MB were sent

    threads = [threading.Thread(target=flood) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert results == [431] * 4
    assert rss_mb() - before < 40
