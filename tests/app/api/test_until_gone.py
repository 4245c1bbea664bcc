"""``until_gone``: the work runs in the caller's task; a client that leaves cancels it
(``ClientGone``, the work's own cleanup run), and the watcher that sees it leave is started only once
the work first waits — work that never waits never starts one."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from app.api.answer import ClientGone, Exchange, until_gone


class Client:
    """A request whose client leaves once ``leaves`` is set (never, when ``None``); counts reads and
    sets ``read`` at the first."""

    def __init__(self, leaves: asyncio.Event | None) -> None:
        self.leaves = leaves
        self.reads = 0
        self.read = asyncio.Event()

    async def receive(self) -> dict[str, Any]:
        self.reads += 1
        self.read.set()
        await (self.leaves or asyncio.Event()).wait()
        return {"type": "http.disconnect"}


def exchange(client: Client) -> Exchange:
    return Exchange(request=client, services=None, ready=None)  # type: ignore[arg-type]


def test_a_client_that_leaves_cancels_the_work() -> None:
    log: list[str] = []

    async def go() -> None:
        started = asyncio.Event()
        client = Client(leaves=started)  # it leaves once the work is under way

        async def work() -> str:
            started.set()
            try:
                await asyncio.Event().wait()  # the backend, silent until the client has left
            finally:
                log.append("upstream closed")
            return "answer"

        try:
            await until_gone(exchange(client), work())
        finally:
            log.append(f"{client.reads} read")

    with pytest.raises(ClientGone):
        asyncio.run(go())
    assert log == ["upstream closed", "1 read"]


def test_the_watcher_starts_only_once_the_work_waits() -> None:
    log: list[str] = []

    async def go() -> str:
        client = Client(leaves=None)

        async def work() -> str:
            log.append(f"before the first wait: {len(asyncio.all_tasks())} tasks, {client.reads} reads")
            await client.read.wait()  # the work waits: the watcher starts and reads (it would hang otherwise)
            log.append(f"after it: {len(asyncio.all_tasks())} tasks, {client.reads} reads")
            return "answer"

        async with asyncio.timeout(30):  # (no task of its own, unlike wait_for)
            return await until_gone(exchange(client), work())

    assert asyncio.run(go()) == "answer"
    assert log == ["before the first wait: 1 tasks, 0 reads", "after it: 2 tasks, 1 reads"]


def test_work_that_never_waits_starts_no_watcher() -> None:
    reads: list[int] = []

    async def go() -> str:
        client = Client(leaves=None)

        async def work() -> str:
            return "answer"

        answer = await until_gone(exchange(client), work())
        await asyncio.sleep(0.01)  # a chance for the cancelled callback to start one late (it must not)
        reads.append(client.reads)
        return answer

    assert asyncio.run(go()) == "answer" and reads == [0]
