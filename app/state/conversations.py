"""Conversations (the Conversations API): ``StoredConversation``, what a write did (``Appended``), a
page of items (``ItemPage``), and the ``ConversationStore`` that keeps them.

A conversation is its id, owner digest, creation time and metadata, and an ordered list of items
(``app.state.items.StoredItem``); its size is its metadata's encoding plus its items'. Each write is
within the conversation's ``ConversationLimits`` and refused whole when it would pass one. A
``ConversationStore`` keeps a conversation ``ttl`` seconds from its last write, readable only by
the tenant that made it:

* ``create(conversation, items, tenant, limits)`` → ``Appended`` (refused whole past a limit);
* ``get(id, tenant)`` → the conversation, or ``None`` (absent, expired, another tenant's);
* ``update(id, tenant, metadata, limits)`` → ``Appended`` (its metadata replaced);
* ``delete(id, tenant)`` → whether it was there;
* ``add_items(id, items, tenant, limits, skip_existing=False)`` → ``Appended``;
* ``list_items(id, tenant, after, limit, descending)`` → an ``ItemPage``, or ``None``;
* ``get_item(id, item_id, tenant)`` and ``delete_item(id, item_id, tenant)`` → the conversation
  (``None`` when it is not there) with the item, or whether it was deleted;
* ``read_items(id, tenant, since=None)`` → the items in order (for a prompt) and an ``ItemsMark``
  of where the read ended, or ``None``. From a mark an earlier read left, only the items added
  since are read — unless an item was deleted in between (or the conversation is another than the
  mark's): then all of them (``ItemsRead.whole``). So a conversation that only grows is read in
  the time its new items take.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import orjson

from app.state.items import StoredItem


@dataclass(frozen=True, slots=True)
class StoredConversation:
    """A conversation's own fields (``GET /v1/conversations/{id}``), and how many items and bytes
    it holds."""

    id: str
    created_at: int
    metadata: dict[str, Any] = field(default_factory=dict)
    items: int = 0
    size: int = 0

    def encode_meta(self) -> bytes:
        """The conversation's own fields as stored (its size counts them)."""
        return orjson.dumps({"created_at": self.created_at, "metadata": self.metadata})

    @classmethod
    def decode_meta(cls, conversation_id: str, body: bytes, items: int, size: int) -> StoredConversation:
        data = orjson.loads(body)
        return cls(conversation_id, int(data.get("created_at") or 0), data.get("metadata") or {}, items, size)

    def view(self) -> dict[str, Any]:
        """The conversation object of the API."""
        return {"id": self.id, "object": "conversation", "created_at": self.created_at, "metadata": self.metadata}


@dataclass(frozen=True, slots=True)
class ConversationLimits:
    """What one conversation may hold: items, and bytes (its metadata and items, encoded)."""

    items: int = 10_000
    bytes: int = 16 << 20


Over = Literal["items", "bytes"]


@dataclass(slots=True)
class Appended:
    """What adding items to a conversation did. ``conversation`` is ``None`` when the conversation
    is absent (or another owner's); else it is the conversation after the write — or, when the
    write was refused, before it: ``over`` names the limit the items would have passed, and
    ``duplicate`` an item id the conversation (or the batch) already holds. A refused write
    changes nothing."""

    conversation: StoredConversation | None = None
    added: list[str] = field(default_factory=list)
    over: Over | None = None
    duplicate: str | None = None


@dataclass(slots=True)
class ItemPage:
    """One page of a conversation's items (``after`` excluded), in the order asked for, and
    whether more follow."""

    items: list[StoredItem] = field(default_factory=list)
    has_more: bool = False


@dataclass(frozen=True, slots=True)
class ItemsMark:
    """Where a read of a conversation's items ended: the position its next item will take (the store's
    own count of items ever added) and how many items it held. Items are only ever added at the end
    or deleted, so when the two have grown alike since, no item was deleted in between."""

    next: int
    count: int

    def unbroken(self, next_now: int, count_now: int) -> bool:
        """Whether the conversation, now at ``next_now`` holding ``count_now`` items, is this mark's
        with items only added since."""
        return 0 <= next_now - self.next == count_now - self.count


@dataclass(slots=True)
class ItemsRead:
    """What ``read_items`` read: the conversation's own fields (with its count and size), the items
    in order — all of them when ``whole``, else those added since the mark given — and the mark
    where this read ends."""

    conversation: StoredConversation
    items: list[StoredItem]
    mark: ItemsMark
    whole: bool


def plan_append(conversation: StoredConversation, items: list[StoredItem], present: set[str],
                limits: ConversationLimits, skip_existing: bool) -> tuple[list[StoredItem], Appended | None]:
    """Which of ``items`` a conversation takes (``present``: the ids among them it already holds),
    or the refusal: an id it or the batch already holds (unless ``skip_existing``: those are left
    out), or a limit the items would pass."""
    taken: list[StoredItem] = []
    seen = set(present)
    for item in items:
        if item.id in seen:
            if skip_existing:
                continue
            return [], Appended(conversation, duplicate=item.id)
        seen.add(item.id)
        taken.append(item)
    if conversation.items + len(taken) > limits.items:
        return [], Appended(conversation, over="items")
    if conversation.size + sum(len(item.encode()) for item in taken) > limits.bytes:
        return [], Appended(conversation, over="bytes")
    return taken, None


class ConversationStore(Protocol):
    """See the module docstring."""

    async def create(self, conversation: StoredConversation, items: list[StoredItem], tenant: str,
                     limits: ConversationLimits) -> Appended: ...

    async def get(self, conversation_id: str, tenant: str) -> StoredConversation | None: ...

    async def update(self, conversation_id: str, tenant: str, metadata: dict[str, Any],
                     limits: ConversationLimits) -> Appended: ...

    async def delete(self, conversation_id: str, tenant: str) -> bool: ...

    async def add_items(self, conversation_id: str, items: list[StoredItem], tenant: str,
                        limits: ConversationLimits, skip_existing: bool = False) -> Appended: ...

    async def list_items(self, conversation_id: str, tenant: str, after: str | None, limit: int,
                         descending: bool) -> ItemPage | None: ...

    async def get_item(self, conversation_id: str, item_id: str,
                       tenant: str) -> tuple[StoredConversation | None, StoredItem | None]: ...

    async def delete_item(self, conversation_id: str, item_id: str,
                          tenant: str) -> tuple[StoredConversation | None, bool]: ...

    async def read_items(self, conversation_id: str, tenant: str,
                         since: ItemsMark | None = None) -> ItemsRead | None: ...


__all__ = ["Appended", "ConversationLimits", "ConversationStore", "ItemPage", "ItemsMark", "ItemsRead", "Over",
           "StoredConversation", "plan_append"]
