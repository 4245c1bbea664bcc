"""Stored items, and the item index that finds them by id.

An item — of a stored response (its input and output) or of a conversation — is a ``StoredItem``:
the item as the API shows it, and whether toolwire wrote it (``trusted``: an output item of a
response; a client's items, however they arrived, are not). Only trusted reasoning reaches a prompt
as the model's own thinking. Every byte bound counts ``StoredItem.encode()``.

The item index maps an item id to the stored responses and conversations of the same owner that
hold an item with that id; ``ResponseStore.items`` answers through it (``Found``), which is what an
``item_reference`` names. Stores write and drop the index with what it points to.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

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


__all__ = ["MAX_ID", "Found", "StoredItem", "found_items", "indexable", "item_in", "response_items"]
