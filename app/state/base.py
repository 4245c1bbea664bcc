"""What every kind of store shares: its failures, owners, and decoding large bodies off the loop.

Every failure to reach or use a store is ``StoreUnavailable`` (a request that needed it answers 503
``store_unavailable``; one that had already been answered keeps its answer); ``StoreTimeout`` is
the kind that cost time, which the store's breaker counts (``app.state.health``). A record belongs
to its owner: a digest of the tenant keyed with the store's own secret (``owner_digest``), never
the tenant itself.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
from collections.abc import Callable
from functools import lru_cache
from typing import Any, TypeVar

T = TypeVar("T")

#: bodies larger than this (bytes, together) are decoded in a worker thread, never on the event
#: loop (a 16 MiB chain of small items takes ~0.2 s to decode) — nor under a store's lock
DECODE_INLINE = 256 << 10


async def off_loop(size: int, work: Callable[..., T], *args: Any) -> T:
    """``work(*args)`` (decoding ``size`` bytes): inline up to ``DECODE_INLINE``, else in a worker thread."""
    if size <= DECODE_INLINE:
        return work(*args)
    return await asyncio.to_thread(work, *args)


class StoreUnavailable(Exception):
    """The store could not be read or written (Redis down, disk full, a corrupt file)."""


class StoreTimeout(StoreUnavailable):
    """The store did not answer in time (a hung Redis, a partition): what its breaker counts."""


@lru_cache(maxsize=1024)  # (a store asks it of the same few tenants at every call: one HMAC each)
def owner_digest(secret: bytes, tenant: str) -> str:
    """The owner a store records for ``tenant``: a digest keyed with the store's own secret, so the
    stored value says nothing about the key even to someone who reads the store."""
    return hmac.new(secret, b"toolwire owner\0" + tenant.encode(), hashlib.sha256).hexdigest()


__all__ = ["DECODE_INLINE", "StoreTimeout", "StoreUnavailable", "off_loop", "owner_digest"]
