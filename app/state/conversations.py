"""What the store holds for the Conversations API, typed, and what its item index answers.

A conversation (``StoredConversation``) is its id, owner digest, creation time and metadata, and an
ordered list of items. Each item is a ``StoredItem``: the item as the API shows it, and whether
toolwire wrote it (``trusted``: an output item of a response; a client's items, however they
arrived, are not). Only trusted reasoning reaches a prompt as the model's own thinking.

The item index maps an item id to the stored responses and conversations of the same owner that
hold an item with that id; ``found`` (``ResponseStore.items``) answers through it. Every byte bound
counts ``StoredItem.encode()``: a conversation's size is its metadata's encoding plus its items'.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

#: the one-byte prefix of an encoded item: written by toolwire, or by a client
_TRUSTED, _CLIENT = b"1", b"0"
#: the longest item id the index keeps (a longer one, or one with a line break, cannot be referred to)
MAX_ID = 256


def indexable(item_id: object) -> bool:
    return isinstance(item_id, str) and 0 < len(item_id) <= MAX_ID and "\n" not in item_id


@dataclass(frozen=True, slots=True)
class StoredItem:
    """One stored item: the item object, and whether toolwire wrote it."""

    item: dict[str, Any]
    trusted: bool = False

    @property
    def id(self) -> str:
        return str(self.item.get("id") or "")

    def encode(self) -> bytes:
        return (_TRUSTED if self.trusted else _CLIENT) + orjson.dumps(self.item)

    @classmethod
    def decode(cls, body: bytes) -> StoredItem:
        return cls(orjson.loads(body[1:]), body[:1] == _TRUSTED)


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


@dataclass(slots=True)
class Found:
    """Stored items by id (``ResponseStore.items``): for each id the store holds for the owner, one
    copy — toolwire's own (``trusted``) when any copy is. ``over`` is set when reading the stored
    responses that hold them would pass the byte limit (nothing is returned then)."""

    items: dict[str, StoredItem] = field(default_factory=dict)
    over: bool = False


def response_items(response: dict[str, Any], inputs: list[dict[str, Any]]) -> list[tuple[str, bool]]:
    """The ids a stored response indexes (``indexable`` ones), each with whether toolwire wrote it:
    its input items (the client's) and its output items (toolwire's). An id in both counts as
    toolwire's."""
    seen: dict[str, bool] = {}
    for item in inputs:
        if isinstance(item, dict) and indexable(item.get("id")):
            seen.setdefault(item["id"], False)
    for item in response.get("output") or ():
        if isinstance(item, dict) and indexable(item.get("id")):
            seen[item["id"]] = True
    return list(seen.items())


def item_in(response: dict[str, Any], inputs: list[dict[str, Any]], item_id: str,
            trusted: bool) -> StoredItem | None:
    """The item ``item_id`` of a stored response: from its output when ``trusted``, else its input."""
    for item in (response.get("output") or ()) if trusted else inputs:
        if isinstance(item, dict) and item.get("id") == item_id:
            return StoredItem(item, trusted)
    return None


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


def found_items(best: dict[str, tuple[bool, str, Any]], bodies: dict[str, Any]) -> Found:
    """Stored items from the copies a store chose: ``best`` maps an id to ``(trusted, kind, what)``
    — ``kind`` ``"c"`` with the encoded conversation item, or ``"r"`` with the id of the stored
    response that holds it, whose encoded body is in ``bodies``."""
    found = Found()
    records: dict[str, tuple[dict[str, Any], list[dict[str, Any]]]] = {}
    for key, (trusted, kind, holder) in best.items():
        if kind == "c":
            found.items[key] = StoredItem.decode(bytes(holder))
            continue
        if holder not in records:
            data = orjson.loads(bodies[holder])
            records[holder] = (data.get("response") or {}, data.get("input") or [])
        item = item_in(*records[holder], key, trusted)
        if item is not None:
            found.items[key] = item
    return found
