"""Entries filed under a key, bounded in bytes: the bookkeeping the render cache
(``app.templates.resume``) and the known-message cache (``app.api.chat.known``) share.

Each bucket holds its entries longest first (``length`` says how long one is), so a lookup that
scans a bucket meets the longest candidate first; past the byte bound the least recently used
entry goes, from whichever bucket holds it. Entries are told apart by identity.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from typing import Generic, Protocol, TypeVar


class Filed(Protocol):
    """What an entry carries for its bookkeeping: its bucket and what it counts in bytes."""

    key: bytes
    size: int


E = TypeVar("E", bound=Filed)


class BucketedLRU(Generic[E]):
    """See the module docstring. Not locked by itself: callers hold ``lock`` around a lookup and
    what it touches, and around ``add`` and ``drop``."""

    def __init__(self, length: Callable[[E], int]) -> None:
        self.length = length
        self.bytes = 0
        self.lock = threading.Lock()
        self._order: OrderedDict[int, E] = OrderedDict()  # by id, least recently used first
        self._buckets: dict[bytes, list[E]] = {}

    def bucket(self, key: bytes) -> Sequence[E]:
        """The entries filed under ``key``, longest first."""
        return self._buckets.get(key, ())

    def touch(self, entry: E) -> None:
        """``entry`` was used: it goes last when the bound is enforced."""
        self._order.move_to_end(id(entry))

    def holds(self, entry: E) -> bool:
        return id(entry) in self._order

    def add(self, entry: E, max_bytes: int) -> None:
        """File ``entry`` (after the entries of its bucket at least as long), then drop the least
        recently used until the entries take at most ``max_bytes``."""
        bucket = self._buckets.setdefault(entry.key, [])
        n = self.length(entry)
        at = 0
        while at < len(bucket) and self.length(bucket[at]) >= n:
            at += 1
        bucket.insert(at, entry)
        self._order[id(entry)] = entry
        self.bytes += entry.size
        while self.bytes > max_bytes:
            self.drop(next(iter(self._order.values())))

    def drop(self, entry: E) -> None:
        del self._order[id(entry)]
        self.bytes -= entry.size
        bucket = self._buckets[entry.key]
        bucket.remove(entry)  # entries compare by identity (``eq=False``)
        if not bucket:
            del self._buckets[entry.key]

    def clear(self) -> None:
        self._order.clear()
        self._buckets.clear()
        self.bytes = 0

    def filed(self) -> Iterator[E]:
        """Every entry, bucket by bucket (the index's view: the tests check it holds what the order does)."""
        for bucket in self._buckets.values():
            yield from bucket

    def __len__(self) -> int:
        return len(self._order)
