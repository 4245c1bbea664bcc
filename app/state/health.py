"""Whether the store answers, known without waiting on it: a circuit breaker in front of every store
call, and a background check whose last result readiness and ``/health`` report.

* ``Breaker``: closed, calls go through. ``failures`` timeouts in a row (calls, or background
  checks, that got no answer in time) open it: calls are refused at once. The store's check is its
  half-open probe: while the breaker is open, the check's ping (every ``--store-check-interval``,
  bounded by ``--store-check-timeout``) is the one call let through, and its answer closes the
  breaker — so no request ever waits on a store the breaker holds for hung. Only timeouts count: a
  store that refuses at once (Redis gone, a full disk) costs a call nothing, so every call still
  asks it, and the first one after it is back succeeds.
* ``Guard``: a store's breaker and the time one of its operations may take (``timeout``; ``None``:
  unbounded). Every store operation runs through ``guard.run(work)``; a refusal, a timeout and a
  failure are all ``StoreUnavailable`` (the 503 ``store_unavailable`` a request answers).
* ``StoreCheck``: pings the store every ``interval`` seconds in a task of its own, each ping bounded
  by ``timeout``, and keeps the last result (``state``: ``ok`` or ``unavailable``) — what the probes
  report, so they never make a store round trip of their own. A check is also the breaker's probe:
  an answer closes the breaker, a ping with no answer in time counts as a timeout.

A hung store (a stopped Redis, a partition) thus costs the requests that meet it first at most
``timeout`` each; once the breaker opens, the others are answered at once, and the first good
check lets them through again.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import Literal, TypeVar

from app.state.base import StoreTimeout, StoreUnavailable

log = logging.getLogger("toolwire")
T = TypeVar("T")

BreakerState = Literal["closed", "open"]


class Breaker:
    """See the module docstring."""

    def __init__(self, failures: int = 3) -> None:
        self.failures = failures
        self._in_a_row = 0

    @property
    def state(self) -> BreakerState:
        return "open" if self._in_a_row >= self.failures else "closed"

    def admit(self) -> bool:
        """Whether a call may go ahead now (closed)."""
        return self._in_a_row < self.failures

    def succeeded(self) -> None:
        """A call or a check got an answer: closed."""
        self._in_a_row = 0

    def failed(self) -> None:
        """A call or a check got no answer in time."""
        self._in_a_row += 1


class Guard:
    """See the module docstring; ``what`` names the store in messages."""

    def __init__(self, breaker: Breaker, timeout: float | None, what: str = "the response store") -> None:
        self.breaker = breaker
        self.timeout = timeout
        self.what = what

    async def run(self, work: Awaitable[T]) -> T:
        """``work``'s result, unless the breaker refuses it, it takes longer than ``timeout`` or it
        fails (``StoreUnavailable`` each time); an answer or a timeout is the breaker's to count (a
        failure that came at once is neither)."""
        if not self.breaker.admit():
            if inspect.iscoroutine(work):
                work.close()
            raise StoreUnavailable(f"{self.what} did not answer in time {self.breaker.failures} times in a row; "
                                   "calls are refused until a check finds it answering again")
        try:
            async with asyncio.timeout(self.timeout):
                result = await work
        except TimeoutError:
            self.breaker.failed()
            raise StoreTimeout(f"{self.what} did not answer within {self.timeout:g} s") from None
        except StoreTimeout:
            self.breaker.failed()
            raise
        self.breaker.succeeded()
        return result


StoreState = Literal["unknown", "ok", "unavailable"]


class StoreCheck:
    """See the module docstring. ``ping``: whether the store answers now (never raises)."""

    def __init__(self, ping: Callable[[], Awaitable[bool]], breaker: Breaker, interval: float,
                 timeout: float) -> None:
        self._ping = ping
        self.breaker = breaker
        self.interval = interval
        self.timeout = timeout
        self.state: StoreState = "unknown"
        self._task: asyncio.Task[None] | None = None

    async def check(self) -> StoreState:
        """Ping the store once (within ``timeout``), note the result and tell the breaker."""
        try:
            async with asyncio.timeout(self.timeout):
                answered = await self._ping()
        except TimeoutError:
            answered = False
            self.breaker.failed()
        if answered:
            self.breaker.succeeded()
        state: StoreState = "ok" if answered else "unavailable"
        if state != self.state and self.state != "unknown":
            if answered:
                log.info("the response store answers again")
            else:
                log.warning("the response store does not answer its checks (each given %g s)", self.timeout)
        self.state = state
        return state

    def start(self) -> None:
        """Check every ``interval`` seconds from now on, in a task of its own."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._every_interval())

    async def _every_interval(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                await self.check()
            except Exception:  # a check never ends the checking
                log.exception("store check failed")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None


__all__ = ["Breaker", "BreakerState", "Guard", "StoreCheck", "StoreState"]
