"""The lean streaming HTTP client used for generation requests."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
import uvloop

from app.backends.streamhttp import ConnectFailed, ReadTimedOut, StreamBroken, StreamingClient

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], object]


async def serve(handler: Handler) -> tuple[asyncio.AbstractServer, str]:
    async def wrapped(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                                  if line.lower().startswith(b"content-length")))
                await reader.readexactly(length)
                if await handler(reader, writer) is False:  # type: ignore[misc]
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(wrapped, "127.0.0.1", 0)
    return server, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1/completions"


async def drained(client: StreamingClient) -> None:
    """Wait for the client's background drains (``aclose(finished=True)``) to be over: the connection
    is back in the pool, or closed."""
    while client._draining:
        await asyncio.gather(*list(client._draining))


def chunked(*pieces: bytes) -> bytes:
    return b"".join(f"{len(p):x}\r\n".encode() + p + b"\r\n" for p in pieces) + b"0\r\n\r\n"


HEAD = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"


def test_chunked_body_split_at_every_byte() -> None:
    body = chunked(b"data: one\n\n", b"data: two\n\n", b"x" * 300)

    async def run() -> None:
        async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
            for i in range(len(HEAD + body)):
                writer.write((HEAD + body)[i:i + 1])
                await writer.drain()
                await asyncio.sleep(0)
            return False

        server, url = await serve(handler)
        client = StreamingClient(2, 2)
        response = await client.post(url, b"{}", {})
        assert response.status_code == 200
        assert await response.aread() == b"data: one\n\ndata: two\n\n" + b"x" * 300
        await response.aclose()
        server.close()

    asyncio.run(run())


EVENTS = [f"data: {{\"text\": \"token {i}\"}}\n\n".encode() for i in range(300)]


async def serve_burst() -> tuple[asyncio.AbstractServer, str, list[asyncio.StreamWriter]]:
    """A backend that bursts: head and all of ``EVENTS`` in one write, per request; the connections
    it served (to tell whether the client reused one)."""
    connections: list[asyncio.StreamWriter] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        connections.append(writer)
        writer.write(HEAD + chunked(*EVENTS))
        await writer.drain()
        return True

    server, url = await serve(handler)
    return server, url, connections


def test_a_first_read_of_many_chunks_hands_on_the_first_chunk_alone() -> None:
    """A backend that bursts: head and 300 chunks in one write, so one read holds them all. The
    first chunk's data leaves before the rest of the read is de-chunked; then the rest follows in
    larger pieces (batching kept), nothing lost or repeated; the connection is reused afterwards."""

    async def run() -> None:
        server, url, connections = await serve_burst()
        client = StreamingClient(2, 2)
        for _ in range(2):
            response = await client.post(url, b"{}", {})
            pieces = [piece async for piece in response.aiter_bytes()]
            assert pieces[0] == EVENTS[0]
            assert b"".join(pieces) == b"".join(EVENTS)
            assert len(pieces) < len(EVENTS) // 2, "the rest of the burst is still handed on in large pieces"
            await response.aclose()
        assert len({id(w) for w in connections}) == 1, "the framing ended cleanly: the connection was reused"
        await client.close()
        server.close()

    asyncio.run(run())


def test_a_stream_left_after_its_first_chunk_drains_from_where_it_stopped() -> None:
    """The caller stops right after the first chunk, which left in the middle of a read: the
    background drain goes on from there (the framing state kept on the response), so the connection
    is reused and the next response is read whole and right."""

    async def run() -> None:
        server, url, connections = await serve_burst()
        client = StreamingClient(2, 2)
        response = await client.post(url, b"{}", {})
        async for piece in response.aiter_bytes():
            assert piece == EVENTS[0]
            break
        await response.aclose(finished=True)
        await drained(client)
        response = await client.post(url, b"{}", {})
        assert await response.aread() == b"".join(EVENTS)
        await response.aclose()
        assert len({id(w) for w in connections}) == 1
        await client.close()
        server.close()

    asyncio.run(run())


@pytest.mark.parametrize("seed", range(8))
def test_chunked_body_in_random_writes_loses_and_repeats_nothing(seed: int) -> None:
    import random

    rng = random.Random(seed)
    data = HEAD + chunked(*EVENTS[:rng.randint(1, 60)], b"x" * rng.randint(1, 5000))
    cuts = sorted(rng.sample(range(1, len(data)), 12))

    async def run() -> None:
        async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
            for start, end in zip([0, *cuts], [*cuts, len(data)], strict=True):
                writer.write(data[start:end])
                await writer.drain()
                await asyncio.sleep(0.001 * rng.random())
            return False

        server, url = await serve(handler)
        client = StreamingClient(2, 2)
        response = await client.post(url, b"{}", {})
        pieces = [piece async for piece in response.aiter_bytes()]
        body = data[len(HEAD):]
        assert b"".join(pieces) == await _dechunked(body)
        assert EVENTS[0].startswith(pieces[0])
        await response.aclose()
        await client.close()
        server.close()

    asyncio.run(run())


async def _dechunked(body: bytes) -> bytes:
    """The data of a chunked body, de-framed independently of the client (a reference)."""
    out, pos = [], 0
    while True:
        line_end = body.index(b"\r\n", pos)
        size = int(body[pos:line_end], 16)
        if size == 0:
            return b"".join(out)
        out.append(body[line_end + 2:line_end + 2 + size])
        pos = line_end + 2 + size + 2


def test_keep_alive_reuse_and_stale_connection_retry() -> None:
    async def run() -> None:
        connections = []

        async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
            connections.append(writer)
            writer.write(HEAD + chunked(b"ok"))
            await writer.drain()
            return len(connections) != 2  # the second request's connection is closed afterwards

        server, url = await serve(handler)
        client = StreamingClient(2, 2)
        for _ in range(3):
            response = await client.post(url, b"{}", {})
            assert await response.aread() == b"ok"
            await response.aclose()
            await asyncio.sleep(0.05)
        assert len({id(w) for w in connections}) == 2, "the first connection is reused, the closed one replaced"
        await client.close()
        server.close()

    asyncio.run(run())


def test_late_terminator_after_last_event_keeps_the_connection() -> None:
    """The caller stops at the stream's last event; the chunked terminator arrives later. A
    ``finished`` close drains it in the background and pools the connection; an unfinished close
    drops the connection at once (the backend must see the client leave)."""

    async def run() -> None:
        connections: list[asyncio.StreamWriter] = []
        let_go = [asyncio.Event() for _ in range(5)]  # request k's caller has let go: its terminator comes now

        async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
            connections.append(writer)
            writer.write(HEAD + b"c\r\ndata: [DONE]\r\n")
            await writer.drain()
            await let_go[len(connections) - 1].wait()
            writer.write(b"0\r\n\r\n")
            await writer.drain()
            return True

        server, url = await serve(handler)
        client = StreamingClient(2, 2)
        for k in range(3):
            response = await client.post(url, b"{}", {})
            async for piece in response.aiter_bytes():
                assert piece == b"data: [DONE]"
                break
            await response.aclose(finished=True)
            let_go[k].set()
            await drained(client)
        assert len({id(w) for w in connections}) == 1, "one connection, reused after each drain"

        response = await client.post(url, b"{}", {})
        async for _ in response.aiter_bytes():
            break
        await response.aclose()  # not finished: the connection goes away now
        let_go[3].set()
        let_go[4].set()
        response = await client.post(url, b"{}", {})
        await response.aread()
        await response.aclose()
        assert len({id(w) for w in connections}) == 2, "the unfinished stream's connection was not reused"
        await client.close()
        server.close()

    asyncio.run(run())


def test_content_length_and_close_delimited_bodies() -> None:
    async def run() -> None:
        replies = [b"HTTP/1.1 400 Bad\r\nContent-Length: 5\r\n\r\nhello",
                   b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nuntil the end"]

        async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
            reply = replies.pop(0)
            writer.write(reply)
            await writer.drain()
            return b"Content-Length" in reply

        server, url = await serve(handler)
        client = StreamingClient(2, 2)
        first = await client.post(url, b"{}", {})
        assert (first.status_code, await first.aread()) == (400, b"hello")
        await first.aclose()
        second = await client.post(url, b"{}", {})
        assert await second.aread() == b"until the end"
        await second.aclose()
        server.close()

    asyncio.run(run())


def test_read_timeout_and_broken_streams() -> None:
    async def run() -> None:
        async def stall(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
            writer.write(HEAD + b"2\r\nab\r\n")
            await writer.drain()
            await asyncio.Event().wait()  # silent until the connection goes away
            return False

        server, url = await serve(stall)
        response = await StreamingClient(2, 0.2).post(url, b"{}", {})
        pieces = []
        with pytest.raises(ReadTimedOut):
            async for piece in response.aiter_bytes():
                pieces.append(piece)
        assert pieces == [b"ab"]
        server.close()

        async def drop(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
            writer.write(HEAD + b"2\r\nab\r\n")
            await writer.drain()
            writer.transport.abort()
            return False

        server, url = await serve(drop)
        response = await StreamingClient(2, 2).post(url, b"{}", {})
        with pytest.raises(StreamBroken):
            await response.aread()
        server.close()

        server, url = await serve(stall)
        server.close()
        await server.wait_closed()
        with pytest.raises(ConnectFailed):
            await StreamingClient(0.5, 2).post(url, b"{}", {})

    asyncio.run(run())


def test_headers_and_request_line() -> None:
    async def run() -> None:
        seen: list[bytes] = []

        async def capture(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            head = await reader.readuntil(b"\r\n\r\n")
            seen.append(head)
            length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length")))
            seen.append(await reader.readexactly(length))
            writer.write(HEAD + chunked(b"x"))
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(capture, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        client = StreamingClient(2, 2)
        response = await client.post(f"http://127.0.0.1:{port}/v1/completions?x=1", b'{"a": 1}',
                                     {"Authorization": "Bearer k"})
        await response.aread()
        await response.aclose()
        head = seen[0].decode()
        assert head.startswith("POST /v1/completions?x=1 HTTP/1.1\r\n")
        assert "Authorization: Bearer k" in head and f"Host: 127.0.0.1:{port}" in head
        assert seen[1] == b'{"a": 1}'
        server.close()

    asyncio.run(run())


def test_a_body_in_pieces_arrives_whole_with_its_length() -> None:
    """A body handed over in pieces (a prompt's own encoding among them, not joined) is sent as one
    body: its ``Content-Length`` the pieces' sum, its bytes theirs in order — under uvloop too."""
    got: list[bytes] = []

    async def run() -> None:
        async def wrapped(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length")))
            got.append(await reader.readexactly(length))
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(wrapped, "127.0.0.1", 0)
        url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1/completions"
        client = StreamingClient(2, 2)
        pieces = [b'{"model":"m",', b'"prompt":', b'"' + b"x" * 300_000 + b'"', b"}"]
        response = await client.post(url, pieces, {"Content-Type": "application/json"})
        assert response.status_code == 200 and await response.aread() == b"ok"
        await response.aclose()
        server.close()

    for runner in (asyncio.run, uvloop.run):
        got.clear()
        runner(run())
        assert got == [b"".join([b'{"model":"m",', b'"prompt":', b'"' + b"x" * 300_000 + b'"', b"}"])]
