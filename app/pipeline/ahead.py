"""``Ahead``: work an answer needs only once the backend's first token is in (its parsers, a face's
encoder, keeping what the request leaves for its conversation's next turn), done by a loop
callback when the request's task first waits — for the backend, once the request is sent — so it
is not on the way to asking the backend."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Ahead(Generic[T]):
    """``make()``, run by a loop callback (see the module docstring). ``get()`` gives what it made
    (made now if the callback has not run; an error it raised, raised here); ``drop()``: not needed
    after all (the request failed), the callback does not run."""

    def __init__(self, make: Callable[[], T]) -> None:
        self.make = make
        self.made: list[T] = []
        self.failure: BaseException | None = None
        self.pending = asyncio.get_running_loop().call_soon(self._run)

    def _run(self) -> None:
        if self.made or self.failure is not None:
            return
        try:
            self.made.append(self.make())
        except Exception as exc:  # noqa: BLE001 - raised again in the request's task (get())
            self.failure = exc

    def get(self) -> T:
        self.pending.cancel()
        self._run()
        if self.failure is not None:
            raise self.failure
        return self.made[0]

    def drop(self) -> None:
        self.pending.cancel()


__all__ = ["Ahead"]
