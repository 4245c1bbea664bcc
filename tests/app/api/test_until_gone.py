"""``until_gone``: the work runs in the caller's task; a client that leaves cancels it
(``ClientGone``, the work's own cleanup run), and the watcher that sees it leave is started only once
the work first waits — work that never waits never starts one."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from app.api.answer import ClientGone, Exchange, until_gone


class Client:
    """A request whose client leaves after ``stay`` seconds (never, when ``None``); counts reads."""

    def __init__(self, stay: float | None) -> None:
        self.stay = stay
        self.reads = 0

    async def receive(self) -> dict[str, Any]:
        self.reads += 1
        if self.stay is None:
            await asyncio.Event().wait()
        await asyncio.sleep(self.stay or 0)
        return {"type": "http.disconnect"}


def exchange(client: Client) -> Exchange:
    return Exchange(request=client, services=None, ready=None)  # type: ignore[arg-type]


def test_a_client_that_leaves_cancels_the_work() -> None:
    client, log = Client(stay=0.01), []

    async def work() -> str:
        try:
            await asyncio.sleep(5)  # the backend, silent
        finally:
            log.append("upstream closed")
        return "answer"

    async def go() -> None:
        await until_gone(exchange(client), work())

    with pytest.raises(ClientGone):
        asyncio.run(go())
    assert log == ["upstream closed"] and client.reads == 1


def test_the_watcher_starts_only_once_the_work_waits() -> None:
    client, log = Client(stay=None), []

    async def work() -> str:
        log.append(f"before the first wait: {len(asyncio.all_tasks())} tasks")
        await asyncio.sleep(0.01)
        log.append(f"after it: {len(asyncio.all_tasks())} tasks, {client.reads} reads")
        return "answer"

    assert asyncio.run(until_gone(exchange(client), work())) == "answer"
    assert log == ["before the first wait: 1 tasks", "after it: 2 tasks, 1 reads"]


def test_work_that_never_waits_starts_no_watcher() -> None:
    client = Client(stay=None)

    async def work() -> str:
        return "answer"

    async def go() -> str:
        answer = await until_gone(exchange(client), work())
        await asyncio.sleep(0.01)  # the cancelled callback does not start one late
        return answer

    assert asyncio.run(go()) == "answer" and client.reads == 0
