"""The SSE response at the ASGI level: the lead goes out with the head, and the body's cleanup runs
however the response ends — even when the client is gone before the first byte."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from app.api.sse import SSEResponse

SCOPE: dict[str, Any] = {"type": "http", "method": "POST", "path": "/v1/chat/completions", "headers": []}


class Body:
    """An SSE body that records what happened to it."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks
        self.iterated = False
        self.closed = 0

    async def __aiter__(self) -> AsyncIterator[bytes]:
        self.iterated = True
        for chunk in self.chunks:
            await asyncio.sleep(0)
            yield chunk

    async def aclose(self) -> None:
        self.closed += 1


async def never_disconnects() -> dict[str, Any]:
    await asyncio.sleep(3600)
    return {"type": "http.disconnect"}


def test_lead_is_sent_right_after_the_head_before_the_body_runs() -> None:
    body = Body([b"data: 2\n\n"])
    log: list[tuple[str, bytes, bool]] = []

    async def send(message: dict[str, Any]) -> None:
        log.append((message["type"], message.get("body", b""), body.iterated))

    asyncio.run(SSEResponse(body, lead=b"data: 1\n\n")(SCOPE, never_disconnects, send))
    assert log[:2] == [("http.response.start", b"", False), ("http.response.body", b"data: 1\n\n", False)]
    assert [m[1] for m in log[2:]] == [b"data: 2\n\n", b""]
    assert body.closed == 1


@pytest.mark.parametrize("fail_on", ["http.response.start", "lead"])
def test_client_gone_before_the_first_byte_still_closes_the_body(fail_on: str) -> None:
    body = Body([b"data: 2\n\n"])

    async def send(message: dict[str, Any]) -> None:
        kind = "lead" if message.get("body") == b"data: 1\n\n" else message["type"]
        if kind == fail_on:
            raise OSError("client went away")

    asyncio.run(SSEResponse(body, lead=b"data: 1\n\n")(SCOPE, never_disconnects, send))
    assert body.closed == 1 and not body.iterated
