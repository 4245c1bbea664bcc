"""The store's breaker, guard and background check (``app.state.health``): work the test holds with
events it releases, or never — no sleeps."""

from __future__ import annotations

import asyncio

import pytest

from app.state import StoreUnavailable
from app.state.base import StoreTimeout
from app.state.health import Breaker, Guard, StoreCheck


def test_the_breaker_opens_after_timeouts_in_a_row_only() -> None:
    breaker = Breaker(failures=3)
    breaker.failed()
    breaker.failed()
    breaker.succeeded()  # an answer in between: the count starts again
    breaker.failed()
    breaker.failed()
    assert breaker.state == "closed" and breaker.admit()
    breaker.failed()
    assert breaker.state == "open" and not breaker.admit()
    breaker.succeeded()
    assert breaker.state == "closed" and breaker.admit()


async def test_the_guard_times_out_a_hung_call_and_then_refuses_at_once() -> None:
    guard = Guard(Breaker(failures=2), timeout=0.01)
    never = asyncio.Event()  # a store that never answers
    for _ in range(2):
        with pytest.raises(StoreTimeout, match="did not answer within"):
            await guard.run(never.wait())
    assert guard.breaker.state == "open"
    refused = never.wait()
    with pytest.raises(StoreUnavailable, match="refused"):
        await guard.run(refused)
    assert refused.cr_frame is None  # the refused call was closed, never left un-awaited


async def test_the_guard_counts_timeouts_and_nothing_else() -> None:
    """A store that refuses at once (Redis gone) costs nothing to ask: only the waits open the breaker."""
    guard = Guard(Breaker(failures=1), timeout=None)

    async def fail(exc: Exception) -> None:
        raise exc

    for exc in (KeyError("not the store's fault"), StoreUnavailable("connection refused")):
        with pytest.raises(type(exc)):
            await guard.run(fail(exc))
        assert guard.breaker.state == "closed"
    with pytest.raises(StoreTimeout):
        await guard.run(fail(StoreTimeout("Redis' own socket timeout")))
    assert guard.breaker.state == "open"


async def test_the_check_keeps_the_last_state_and_is_the_breakers_probe() -> None:
    breaker = Breaker(failures=2)
    release = asyncio.Event()
    answers = [True]

    async def ping() -> bool:
        if not answers[-1]:
            await release.wait()  # held until the test lets it go
        return answers[-1]

    check = StoreCheck(ping, breaker, interval=60, timeout=0.01)
    assert check.state == "unknown"
    assert await check.check() == "ok" and check.state == "ok"
    answers.append(False)
    release.set()
    assert await check.check() == "unavailable"  # a store that says no at once: reported, not counted
    assert breaker.state == "closed"
    release.clear()
    assert await check.check() == "unavailable"  # the hung ping: given up after the timeout
    assert breaker.state == "closed"  # one timeout of the two that open it
    await check.check()
    assert breaker.state == "open" and check.state == "unavailable"
    answers.append(True)
    assert await check.check() == "ok"
    assert breaker.state == "closed"  # the probe's answer closes it


async def test_the_check_runs_in_its_own_task_until_stopped() -> None:
    checked = asyncio.Event()

    async def ping() -> bool:
        checked.set()
        return True

    check = StoreCheck(ping, Breaker(), interval=0.001, timeout=1)
    check.start()
    await checked.wait()
    await check.stop()
    assert check.state == "ok"
