"""Stored responses (the Responses API's ``store: true``), behind one small interface.

A ``ResponseStore`` keeps ``StoredResponse`` records (``app.state.records``) for ``ttl`` seconds,
each readable only by the tenant that stored it (``tenant``: the request's tenant id, see
``app.tenancy``; the store keeps a keyed digest of it, never the id itself):

* ``put(record, tenant)`` stores (replacing a record with the same id);
* ``get(id, tenant)`` → the record, or ``None`` when it is absent, expired or another tenant's;
* ``delete(id, tenant)`` → whether it was there (and the tenant's);
* ``chain(id, tenant, limits)`` → the responses a continuation from ``id`` builds on, oldest first,
  read in one round trip (SQLite: one recursive query; Redis: one script), within ``limits``;
* ``items(ids, tenant, limits)`` → the tenant's stored items with those ids (the item index: every
  item of a stored response or conversation, by id), toolwire's own copy when there is one;
* conversations (``app.state.conversations``): ``create_conversation``, ``get_conversation``,
  ``update_conversation`` (its metadata), ``delete_conversation``, ``add_items``, ``list_items``,
  ``get_item``, ``delete_item``, and ``conversation_items`` (all of them, in order, for a prompt) —
  each within the conversation's ``ConversationLimits``, refused whole when it would pass one;
* ``ping()`` → whether the store answers now (past the guard: the background check's probe);
  ``close()``; ``guard``, the breaker and time bound every other operation runs through
  (``app.state.health``);
* the runs of background responses (``app.state.runs``): ``open_run``, ``append_run``,
  ``settle_run``, ``read_run``.

Every operation is one round trip (SQLite: one transaction; Redis: one script — settling a run:
one watched transaction), and every failure to reach or use the store is ``StoreUnavailable``. The
store is bounded: by age (``ttl``; a conversation's counts from its last write), by record count
(responses and conversations) and by the bytes of all its records (the oldest go first, on every
write); runs by their own budget of the same size. ``open_store`` picks the implementation: an
embedded SQLite file in ``--state-dir``, or Redis (``--response-store redis://…``) when several
replicas share what they stored.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from app.settings import Settings
from app.state.conversations import (
    Appended,
    ConversationLimits,
    Found,
    ItemPage,
    StoredConversation,
    StoredItem,
)
from app.state.health import Breaker, Guard
from app.state.records import Chain, ChainLimits, StoredResponse, StoreUnavailable
from app.state.runs import Batch, RunLimits, RunRead, RunState, RunStore


class ResponseStore(RunStore, Protocol):
    async def put(self, record: StoredResponse, tenant: str) -> None: ...

    async def get(self, response_id: str, tenant: str) -> StoredResponse | None: ...

    async def delete(self, response_id: str, tenant: str) -> bool: ...

    async def chain(self, response_id: str, tenant: str, limits: ChainLimits) -> Chain: ...

    async def items(self, ids: Sequence[str], tenant: str, limits: ChainLimits) -> Found: ...

    async def create_conversation(self, conversation: StoredConversation, items: list[StoredItem], tenant: str,
                                  limits: ConversationLimits) -> Appended: ...

    async def get_conversation(self, conversation_id: str, tenant: str) -> StoredConversation | None: ...

    async def update_conversation(self, conversation_id: str, tenant: str, metadata: dict[str, Any],
                                  limits: ConversationLimits) -> Appended: ...

    async def delete_conversation(self, conversation_id: str, tenant: str) -> bool: ...

    async def add_items(self, conversation_id: str, items: list[StoredItem], tenant: str,
                        limits: ConversationLimits, skip_existing: bool = False) -> Appended: ...

    async def list_items(self, conversation_id: str, tenant: str, after: str | None, limit: int,
                         descending: bool) -> ItemPage | None: ...

    async def get_item(self, conversation_id: str, item_id: str,
                       tenant: str) -> tuple[StoredConversation | None, StoredItem | None]: ...

    async def delete_item(self, conversation_id: str, item_id: str,
                          tenant: str) -> tuple[StoredConversation | None, bool]: ...

    async def conversation_items(self, conversation_id: str, tenant: str) -> list[StoredItem] | None: ...

    guard: Guard

    async def ping(self) -> bool: ...

    async def close(self) -> None: ...


def open_store(settings: Settings) -> ResponseStore:
    """The configured store (``StoreUnavailable`` with a one-line reason when it cannot be opened)."""
    url = settings.response_store
    breaker = Breaker(settings.store_breaker_failures)
    if url and url.startswith(("redis://", "rediss://", "unix://")):
        from app.state.redis import RedisStore

        return RedisStore(url, settings.response_ttl, settings.response_store_max,
                          settings.response_store_max_bytes, guard=Guard(breaker, settings.store_timeout))
    if url:
        raise ValueError(f"--response-store: expected redis://HOST:PORT/DB, got {url!r}")
    from app.state.sqlite import SqliteStore

    return SqliteStore(settings.state_dir / "responses.sqlite3", settings.response_ttl, settings.response_store_max,
                       settings.response_store_max_bytes, guard=Guard(breaker, None))


__all__ = ["Appended", "Batch", "Chain", "ChainLimits", "ConversationLimits", "Found", "ItemPage", "ResponseStore",
           "RunLimits", "RunRead", "RunState", "StoreUnavailable", "StoredConversation", "StoredItem", "StoredResponse",
           "open_store"]
