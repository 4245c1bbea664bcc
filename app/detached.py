"""Work that outlives the request that started it (background responses): tasks by key, bounded per
process, cancelled when the process stops.

``reserve()`` takes a place for one task (a 429 ``APIError`` when ``limit`` are taken); the place is
given back when the ``async with`` block ends unless a task was started in it (``Ticket.start``),
which then holds it until it ends. A detached task is nobody's request: a client leaving never
cancels it; ``cancel(key)`` does (its own cleanup runs), and ``stop()`` cancels every one and waits
for their cleanup, at shutdown.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from types import TracebackType
from typing import Any, Self

from app.errors import APIError
from app.metrics import Metrics

log = logging.getLogger("toolwire")

#: seconds ``stop()`` waits for cancelled tasks to finish their cleanup
STOP_GRACE = 15.0


class Detached:
    """See the module docstring."""

    def __init__(self, limit: int, metrics: Metrics | None = None, what: str = "background responses") -> None:
        self.limit = limit
        self.metrics = metrics
        self.what = what
        self.tasks: dict[str, asyncio.Task[None]] = {}
        self.reserved = 0

    @property
    def used(self) -> int:
        return len(self.tasks) + self.reserved

    def reserve(self) -> Ticket:
        if self.used >= self.limit:
            if self.metrics is not None:
                self.metrics.rejected.labels("background").inc()
            raise APIError(429, f"too many {self.what} in flight on this server (limit {self.limit}); retry shortly",
                           "rate_limit_error", code="rate_limit_exceeded", headers={"Retry-After": "1"})
        self.reserved += 1
        return Ticket(self)

    def _start(self, key: str, work: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(work, name=f"detached {key}")
        self.tasks[key] = task
        if self.metrics is not None:
            self.metrics.background.inc()

        def done(finished: asyncio.Task[None]) -> None:
            if self.tasks.get(key) is finished:
                del self.tasks[key]
            if self.metrics is not None:
                self.metrics.background.dec()
            if not finished.cancelled() and finished.exception() is not None:
                log.error("detached task %s failed", key, exc_info=finished.exception())

        task.add_done_callback(done)
        return task

    def cancel(self, key: str) -> bool:
        """Cancel the task started under ``key`` in this process, if it runs here."""
        task = self.tasks.get(key)
        if task is None or task.done():
            return False
        task.cancel()
        return True

    async def stop(self) -> None:
        """Cancel every task and wait (``STOP_GRACE`` at most) while they clean up."""
        tasks = list(self.tasks.values())
        for task in tasks:
            task.cancel()
        if tasks:
            log.info("stopping: %d %s cancelled", len(tasks), self.what)
            await asyncio.wait(tasks, timeout=STOP_GRACE)


class Ticket:
    """One place among the detached tasks: started once, or given back."""

    def __init__(self, owner: Detached) -> None:
        self._owner = owner
        self._held = True

    def start(self, key: str, work: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        assert self._held, "a ticket starts one task"
        self._held = False
        self._owner.reserved -= 1
        return self._owner._start(key, work)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        if self._held:
            self._held = False
            self._owner.reserved -= 1
