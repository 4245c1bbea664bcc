"""What toolwire keeps: stored responses, conversations and the runs of background responses, each
behind a small interface of its own, and one database under all three.

* ``ResponseStore`` (``app.state.responses``): stored responses, the chains continuations read, and
  the item index (``app.state.items``) that ``item_reference`` goes through;
* ``ConversationStore`` (``app.state.conversations``): conversations and their items;
* ``RunStore`` (``app.state.runs``): background responses' runs — status, heartbeat, events;
* ``StoreDatabase``: what the three share — the ``guard`` (``app.state.health``: the breaker and
  time bound every operation runs through), ``ping()`` (past the guard: the background check's
  probe) and ``close()``.

``open_stores`` opens the configured database and its three stores (``Stores``): an embedded SQLite
file in ``--state-dir`` (``app.state.sqlite``), or Redis (``--response-store redis://…``,
``app.state.redis``) when several replicas share what they stored. Both implement every interface,
and the contract suite (``tests/app/state/``) runs on both.

Rules every store keeps. Records belong to their tenant: each carries a keyed digest of it
(``app.state.base.owner_digest``), and another tenant gets what a missing id gets. Every operation
is one round trip (SQLite: one transaction; Redis: one script — settling a run: one watched
transaction), and every failure to reach or use the store is ``StoreUnavailable``. Everything is
bounded: by age (``ttl``; a conversation and a run count from their last write), and stored
responses and conversations share one budget of records and bytes (the oldest of either go first,
on every write); runs have a budget of their own of the same size.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from app.settings import Settings
from app.state.base import StoreTimeout, StoreUnavailable
from app.state.conversations import (
    Appended,
    ConversationLimits,
    ConversationStore,
    ItemPage,
    ItemsMark,
    ItemsRead,
    StoredConversation,
)
from app.state.health import Breaker, Guard
from app.state.items import Found, StoredItem
from app.state.responses import Chain, ChainLimits, ResponseStore, StoredResponse
from app.state.runs import Batch, RunLimits, RunRead, RunState, RunStore


class StoreDatabase(Protocol):
    """The database under the three stores (see the module docstring)."""

    guard: Guard

    async def ping(self) -> bool: ...

    async def close(self) -> None: ...


@dataclass(frozen=True)
class Stores:
    """The three stores of one database, and the database."""

    responses: ResponseStore
    conversations: ConversationStore
    runs: RunStore
    database: StoreDatabase

    async def close(self) -> None:
        await self.database.close()


def open_stores(settings: Settings) -> Stores:
    """The configured stores (``StoreUnavailable`` with a one-line reason when they cannot be opened,
    ``ValueError`` for a malformed ``--response-store``)."""
    url = settings.response_store
    breaker = Breaker(settings.store_breaker_failures)
    if url and url.startswith(("redis://", "rediss://", "unix://")):
        from app.state.redis import open_redis

        return open_redis(url, settings.response_ttl, settings.response_store_max, settings.response_store_max_bytes,
                          guard=Guard(breaker, settings.store_timeout))
    if url:
        raise ValueError(f"--response-store: expected redis://HOST:PORT/DB, got {url!r}")
    from app.state.sqlite import open_sqlite

    return open_sqlite(settings.state_dir / "responses.sqlite3", settings.response_ttl, settings.response_store_max,
                       settings.response_store_max_bytes, guard=Guard(breaker, None))


__all__ = ["Appended", "Batch", "Chain", "ChainLimits", "ConversationLimits", "ConversationStore", "Found", "ItemPage", "ItemsMark", "ItemsRead",
           "ResponseStore", "RunLimits", "RunRead", "RunState", "RunStore", "StoreDatabase",
           "StoreTimeout", "StoreUnavailable", "StoredConversation", "StoredItem", "StoredResponse", "Stores",
           "open_stores"]
