"""What the first token's path relies on, each able to fail: a response head leaves with the first
body bytes (``HeadWithBody``); a chat tool is shown to the template exactly as ``model_dump`` would
show it; a short conversation is rendered whole, a longer one resumed, to the same prompt."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from app.api.chat.decode import shown_tool
from app.api.chat.protocol import ToolDefinition
from app.api.http_protocol import HeadWithBody


class Recorder(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: Any) -> None:
        self.writes.append(bytes(data))

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True


HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n"


def test_a_head_leaves_with_the_first_body_bytes() -> None:
    async def go() -> list[bytes]:
        raw = Recorder()
        transport = HeadWithBody(raw, asyncio.get_running_loop())
        transport.write(HEAD)
        assert raw.writes == []  # held back
        transport.write(b"5\r\nhello\r\n")
        transport.write(b"0\r\n\r\n")
        await asyncio.sleep(0)
        return raw.writes

    assert asyncio.run(go()) == [HEAD + b"5\r\nhello\r\n", b"0\r\n\r\n"]


def test_a_head_without_a_body_leaves_when_the_loop_pass_ends() -> None:
    async def go() -> tuple[list[bytes], list[bytes]]:
        raw = Recorder()
        transport = HeadWithBody(raw, asyncio.get_running_loop())
        transport.write(HEAD)
        before = list(raw.writes)
        await asyncio.sleep(0)
        return before, raw.writes

    before, after = asyncio.run(go())
    assert before == [] and after == [HEAD]


def test_closing_sends_a_held_head_first() -> None:
    async def go() -> Recorder:
        raw = Recorder()
        transport = HeadWithBody(raw, asyncio.get_running_loop())
        transport.write(HEAD)
        transport.close()
        return raw

    raw = asyncio.run(go())
    assert raw.writes == [HEAD] and raw.closed


@pytest.mark.parametrize("tool", [
    {"type": "function", "function": {"name": "f"}},
    {"function": {"name": "f", "description": None, "parameters": None, "strict": None}},
    {"function": {"parameters": {"type": "object", "properties": {"a": {"default": None}}}, "name": "f",
                  "x": None, "y": {"z": None}, "strict": "true"}, "type": "function", "extra": None, "e2": [None]},
    {"function": {"name": "f", "strict": 1, "description": "d", "q": 1}, "zz": 2},
])
def test_a_tool_is_shown_as_model_dump_shows_it(tool: dict[str, Any]) -> None:
    model = ToolDefinition.model_validate(tool)
    expected, shown = model.model_dump(exclude_none=True), shown_tool(model)
    assert shown == expected
    assert list(shown) == list(expected) and list(shown["function"]) == list(expected["function"])


# ------------------------------------------------------------------ the body, read from ASGI messages


def request_of(messages: list[dict[str, Any]], declared: int | None = None) -> Any:
    from starlette.requests import Request

    queue = list(messages)

    async def receive() -> dict[str, Any]:
        return queue.pop(0)

    headers = [(b"content-length", str(declared).encode())] if declared is not None else []
    return Request({"type": "http", "method": "POST", "path": "/v1/chat/completions", "headers": headers}, receive)


def read(messages: list[dict[str, Any]], limit: int = 1000, declared: int | None = None) -> Any:
    from app.api.server import read_json

    return asyncio.run(read_json(request_of(messages, declared), limit))


def test_a_body_in_pieces_is_joined_before_it_is_parsed() -> None:
    pieces = [b'{"a": ', b'[1, 2', b"]}"]
    messages = [{"type": "http.request", "body": p, "more_body": k < 2} for k, p in enumerate(pieces)]
    assert read(messages) == {"a": [1, 2]}


def test_a_client_that_leaves_before_its_body_is_done_gets_no_500() -> None:
    from app.api.answer import ClientGone

    with pytest.raises(ClientGone):
        read([{"type": "http.request", "body": b'{"a":', "more_body": True}, {"type": "http.disconnect"}])


def test_too_large_bodies_are_refused_as_declared_and_as_they_arrive() -> None:
    from app.errors import APIError

    with pytest.raises(APIError) as declared:
        read([{"type": "http.request", "body": b"{}", "more_body": False}], limit=10, declared=11)
    with pytest.raises(APIError) as streamed:
        read([{"type": "http.request", "body": b"[" + b"1," * 6, "more_body": True},
              {"type": "http.request", "body": b"1]", "more_body": False}], limit=10)
    assert declared.value.status == streamed.value.status == 413


def test_the_answer_routes_are_plain_asgi_routes_of_the_fastapi_app() -> None:
    """toolwire's routes sit in the FastAPI app's own router as plain ASGI routes: Starlette's
    ``Route`` serves an ``Endpoint`` as it is (no per-request wrapping, no FastAPI dependency
    resolution or response validation)."""
    from fastapi import FastAPI
    from starlette.routing import Route

    from app.api.server import Endpoint, create_app
    from app.settings import Settings

    app = create_app(Settings(backend="http://127.0.0.1:9"))
    assert isinstance(app, FastAPI)
    served = {route.path: route for route in app.router.routes if isinstance(route, Route)}
    for path in ("/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/messages"):
        assert isinstance(served[path].app, Endpoint), path
    # the faces first: an answer route is the router's first match
    assert app.router.routes[0].path == "/v1/chat/completions"  # type: ignore[attr-defined]


LISTENERS = ["tcp4", "tcp6", "unix"]


@pytest.mark.parametrize("loop_kind", ["uvloop", "asyncio"])
@pytest.mark.parametrize("listener", LISTENERS)
def test_a_connection_is_set_up_as_uvicorn_sets_it_up(listener: str, loop_kind: str, tmp_path: Any) -> None:
    """Our ``connection_made`` leaves the protocol as uvicorn's own does — the same ``server``,
    ``client`` and ``scheme``, over IPv4, IPv6 and a Unix socket, on uvloop and on asyncio's own
    loop — with its transport wrapped (``HeadWithBody``) and the head's bookkeeping added."""
    import socket

    import uvicorn
    import uvloop
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    from uvicorn.server import ServerState

    from app.api.http_protocol import BoundedHeadProtocol

    if listener == "tcp6" and not socket.has_ipv6:
        pytest.skip("no IPv6 here")
    config = uvicorn.Config(lambda scope, receive, send: None, log_level="warning")
    config.load()
    seen: list[tuple[dict[str, Any], dict[str, Any]]] = []

    class Both(asyncio.Protocol):
        def connection_made(self, transport: Any) -> None:
            theirs = BoundedHeadProtocol(config=config, server_state=ServerState(), app_state={})
            ours = BoundedHeadProtocol(config=config, server_state=ServerState(), app_state={})
            HttpToolsProtocol.connection_made(theirs, transport)
            ours.connection_made(transport)
            ours._disarm()
            seen.append((dict(vars(theirs)), dict(vars(ours))))
            transport.close()

    async def go() -> None:
        loop = asyncio.get_running_loop()
        if listener == "unix":
            path = str(tmp_path / "s")
            server = await loop.create_unix_server(Both, path)
            _, writer = await asyncio.open_unix_connection(path)
        else:
            host = "127.0.0.1" if listener == "tcp4" else "::1"
            try:
                server = await loop.create_server(Both, host, 0)
            except OSError:
                pytest.skip(f"cannot listen on {host}")
            port = server.sockets[0].getsockname()[1]
            _, writer = await asyncio.open_connection(host, port)
        for _ in range(100):
            if seen:
                break
            await asyncio.sleep(0.01)
        writer.close()
        server.close()

    runner = uvloop.run if loop_kind == "uvloop" else asyncio.run
    runner(go())
    assert len(seen) == 1
    theirs, ours = seen[0]
    assert set(ours) - set(theirs) == {"_header_deadline", "_in_head", "_head_bytes", "_head_lines", "_tail"}
    assert set(theirs) <= set(ours)
    for name in ("server", "client", "scheme"):
        assert ours[name] == theirs[name], name
    assert type(ours["flow"]) is type(theirs["flow"])
    assert isinstance(ours["transport"], HeadWithBody)
    if listener != "unix":
        assert ours["client"] is not None and ours["server"] is not None
