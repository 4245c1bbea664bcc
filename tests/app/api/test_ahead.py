"""``Ahead``: what an answer needs only once the first token is in is made by a loop callback when
the request's task first waits (for the backend), not on the way to asking it; ``get()`` makes it
if the callback has not run, and raises what making it raised."""

from __future__ import annotations

import asyncio

import pytest

from app.pipeline.ahead import Ahead


def test_it_is_made_when_the_task_first_waits_and_only_once() -> None:
    log: list[str] = []

    async def go() -> int:
        ahead = Ahead(lambda: log.append("made") or 7)
        log.append("request sent")  # what the task does before it waits: not delayed by the making
        await asyncio.sleep(0)  # waiting for the backend
        log.append("first token")
        return ahead.get()

    assert asyncio.run(go()) == 7
    assert log == ["request sent", "made", "first token"]


def test_get_makes_it_when_the_task_never_waited() -> None:
    async def go() -> list[str]:
        calls: list[str] = []
        ahead = Ahead(lambda: calls.append("made") or calls)
        value = ahead.get()
        await asyncio.sleep(0)  # the callback, cancelled, does not make it again
        return value

    assert asyncio.run(go()) == ["made"]


def test_an_error_in_making_it_is_raised_by_get_not_by_the_loop() -> None:
    handled: list[object] = []

    def fail() -> int:
        raise ValueError("no parser for this format")

    async def go() -> None:
        asyncio.get_running_loop().set_exception_handler(lambda loop, context: handled.append(context))
        ahead = Ahead(fail)
        await asyncio.sleep(0)
        ahead.get()

    with pytest.raises(ValueError, match="no parser"):
        asyncio.run(go())
    assert handled == []


def test_a_dropped_one_is_never_made() -> None:
    made: list[int] = []

    async def go() -> None:
        ahead = Ahead(lambda: made.append(1))
        ahead.drop()  # the request failed before its first token
        await asyncio.sleep(0)

    asyncio.run(go())
    assert made == []
