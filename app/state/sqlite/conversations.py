"""Conversations (``app.state.conversations.ConversationStore``) in the SQLite database.

A conversation is one row of ``conversations`` (owner digest, its own fields, item count, size, the
next position, times) and its items are rows of ``conversation_items`` in order (position, id,
encoded item). Each operation is one transaction; a write renews the conversation's time to live
and keeps the database's shared budget (``SqliteDatabase.bound``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any, TypeVar

from app.state.conversations import (
    Appended,
    ConversationLimits,
    ItemPage,
    ItemsMark,
    ItemsRead,
    StoredConversation,
    plan_append,
)
from app.state.items import StoredItem
from app.state.sqlite.database import SqliteDatabase, chunks, marks

T = TypeVar("T")

SCHEMA = (
    ("CREATE TABLE IF NOT EXISTS conversations (id TEXT PRIMARY KEY, owner TEXT NOT NULL, meta BLOB NOT NULL, "
     "items INTEGER NOT NULL, size INTEGER NOT NULL, next INTEGER NOT NULL, updated REAL NOT NULL, "
     "expires REAL NOT NULL)"),
    "CREATE INDEX IF NOT EXISTS conversations_updated ON conversations (updated)",
    "CREATE INDEX IF NOT EXISTS conversations_expires ON conversations (expires)",
    ("CREATE TABLE IF NOT EXISTS conversation_items (conversation TEXT NOT NULL, seq INTEGER NOT NULL, "
     "id TEXT NOT NULL, body BLOB NOT NULL, PRIMARY KEY (conversation, seq))"),
    "CREATE UNIQUE INDEX IF NOT EXISTS conversation_items_id ON conversation_items (conversation, id)",
    "CREATE INDEX IF NOT EXISTS conversation_items_by_id ON conversation_items (id)",
)


class SqliteConversations:
    """See the module docstring."""

    def __init__(self, db: SqliteDatabase) -> None:
        self.db = db

    # ------------------------------------------------------------------ plumbing (in a transaction)

    def _conversation(self, conversation_id: str, owner: str, now: float) -> StoredConversation | None:
        row = self.db.conn.execute(
            "SELECT meta, items, size FROM conversations WHERE id = ? AND owner = ? AND expires > ?",
            (conversation_id, owner, now)).fetchone()
        return StoredConversation.decode_meta(conversation_id, row[0], row[1], row[2]) if row else None

    def _present(self, conversation_id: str, ids: Iterable[str]) -> set[str]:
        present: set[str] = set()
        for chunk in chunks(list(ids)):
            present.update(key for (key,) in self.db.conn.execute(
                f"SELECT id FROM conversation_items WHERE conversation = ? AND id IN ({marks(chunk)})",
                (conversation_id, *chunk)))
        return present

    def _append(self, conversation: StoredConversation, items: list[StoredItem], now: float) -> StoredConversation:
        """Add ``items`` (already checked) at the end of a conversation, and renew its time to live."""
        conn = self.db.conn
        first = conn.execute("SELECT next FROM conversations WHERE id = ?", (conversation.id,)).fetchone()[0]
        rows = [(conversation.id, first + k, item.id, item.encode()) for k, item in enumerate(items)]
        conn.executemany("INSERT INTO conversation_items (conversation, seq, id, body) VALUES (?, ?, ?, ?)", rows)
        added = sum(len(row[3]) for row in rows)
        conn.execute("UPDATE conversations SET items = items + ?, size = size + ?, next = next + ?, updated = ?, "
                     "expires = ? WHERE id = ?",
                     (len(rows), added, len(rows), now, now + self.db.ttl, conversation.id))
        self.db.count(0, added)
        return replace(conversation, items=conversation.items + len(rows), size=conversation.size + added)

    def _cap(self, limits: ConversationLimits) -> ConversationLimits:
        """A conversation never holds more bytes than the whole database may."""
        return ConversationLimits(limits.items, min(limits.bytes, self.db.max_bytes))

    # ------------------------------------------------------------------ the interface

    async def create(self, conversation: StoredConversation, items: list[StoredItem], tenant: str,
                     limits: ConversationLimits) -> Appended:
        owner = self.db.owner(tenant)
        meta = conversation.encode_meta()
        empty = replace(conversation, items=0, size=len(meta))

        def work() -> Appended:
            now = time.time()
            taken, refused = plan_append(empty, items, set(), self._cap(limits), skip_existing=False)
            if refused is not None:
                return refused
            with self.db.transaction():
                self.db.conn.execute(
                    "INSERT INTO conversations (id, owner, meta, items, size, next, updated, expires) "
                    "VALUES (?, ?, ?, 0, ?, 0, ?, ?)", (conversation.id, owner, meta, len(meta), now, now + self.db.ttl))
                self.db.count(1, len(meta))
                made = self._append(empty, taken, now)
                self.db.bound(now)
            return Appended(made, [item.id for item in taken])

        return await self.db.run(work)

    async def get(self, conversation_id: str, tenant: str) -> StoredConversation | None:
        owner = self.db.owner(tenant)
        return await self.db.run(lambda: self._conversation(conversation_id, owner, time.time()))

    async def _on(self, conversation_id: str, tenant: str, missing: T, act: Callable[[StoredConversation, float], T]) -> T:
        """``act(conversation, now)`` in one transaction on ``tenant``'s live conversation; ``missing``
        (and nothing done) when it has none of that id."""
        owner = self.db.owner(tenant)

        def work() -> T:
            now = time.time()
            with self.db.transaction():
                current = self._conversation(conversation_id, owner, now)
                return missing if current is None else act(current, now)

        return await self.db.run(work)

    async def update(self, conversation_id: str, tenant: str, metadata: dict[str, Any],
                     limits: ConversationLimits) -> Appended:
        def act(current: StoredConversation, now: float) -> Appended:
            updated = replace(current, metadata=metadata)
            old, new = len(current.encode_meta()), len(updated.encode_meta())
            updated = replace(updated, size=current.size - old + new)
            if updated.size > self._cap(limits).bytes:
                return Appended(current, over="bytes")
            self.db.conn.execute(
                "UPDATE conversations SET meta = ?, size = ?, updated = ?, expires = ? WHERE id = ?",
                (updated.encode_meta(), updated.size, now, now + self.db.ttl, conversation_id))
            self.db.count(0, new - old)
            self.db.bound(now)
            return Appended(updated)

        return await self._on(conversation_id, tenant, Appended(), act)

    async def delete(self, conversation_id: str, tenant: str) -> bool:
        def act(current: StoredConversation, _now: float) -> bool:
            self.db.drop_conversation(conversation_id, current.size)
            return True

        return await self._on(conversation_id, tenant, False, act)

    async def add_items(self, conversation_id: str, items: list[StoredItem], tenant: str,
                        limits: ConversationLimits, skip_existing: bool = False) -> Appended:
        def act(current: StoredConversation, now: float) -> Appended:
            present = self._present(conversation_id, (item.id for item in items))
            taken, refused = plan_append(current, items, present, self._cap(limits), skip_existing)
            if refused is not None:
                return refused
            made = self._append(current, taken, now)
            self.db.bound(now)
            return Appended(made, [item.id for item in taken])

        return await self._on(conversation_id, tenant, Appended(), act)

    async def list_items(self, conversation_id: str, tenant: str, after: str | None, limit: int,
                         descending: bool) -> ItemPage | None:
        owner = self.db.owner(tenant)

        def work() -> ItemPage | None:
            conn = self.db.conn
            with self.db.reading():
                if self._conversation(conversation_id, owner, time.time()) is None:
                    return None
                where, args = "conversation = ?", [conversation_id]
                if after:
                    row = conn.execute("SELECT seq FROM conversation_items WHERE conversation = ? AND id = ?",
                                       (conversation_id, after)).fetchone()
                    if row is None:
                        return ItemPage()
                    where, args = where + (" AND seq < ?" if descending else " AND seq > ?"), [*args, row[0]]
                bodies = [body for (body,) in conn.execute(
                    f"SELECT body FROM conversation_items WHERE {where} ORDER BY seq {'DESC' if descending else 'ASC'} "
                    "LIMIT ?", (*args, limit + 1))]
            return ItemPage([StoredItem.decode(body) for body in bodies[:limit]], len(bodies) > limit)

        return await self.db.run(work)

    async def get_item(self, conversation_id: str, item_id: str,
                       tenant: str) -> tuple[StoredConversation | None, StoredItem | None]:
        owner = self.db.owner(tenant)

        def work() -> tuple[StoredConversation | None, StoredItem | None]:
            with self.db.reading():
                current = self._conversation(conversation_id, owner, time.time())
                if current is None:
                    return None, None
                row = self.db.conn.execute("SELECT body FROM conversation_items WHERE conversation = ? AND id = ?",
                                           (conversation_id, item_id)).fetchone()
            return current, StoredItem.decode(row[0]) if row else None

        return await self.db.run(work)

    async def delete_item(self, conversation_id: str, item_id: str,
                          tenant: str) -> tuple[StoredConversation | None, bool]:
        def act(current: StoredConversation, now: float) -> tuple[StoredConversation | None, bool]:
            conn = self.db.conn
            row = conn.execute("SELECT length(body) FROM conversation_items WHERE conversation = ? AND id = ?",
                               (conversation_id, item_id)).fetchone()
            if row is None:
                return current, False
            conn.execute("DELETE FROM conversation_items WHERE conversation = ? AND id = ?", (conversation_id, item_id))
            conn.execute("UPDATE conversations SET items = items - 1, size = size - ?, updated = ?, "
                         "expires = ? WHERE id = ?", (row[0], now, now + self.db.ttl, conversation_id))
            self.db.count(0, -row[0])
            return replace(current, items=current.items - 1, size=current.size - row[0]), True

        return await self._on(conversation_id, tenant, (None, False), act)

    async def read_items(self, conversation_id: str, tenant: str,
                         since: ItemsMark | None = None) -> ItemsRead | None:
        owner = self.db.owner(tenant)

        def work() -> ItemsRead | None:
            conn = self.db.conn
            with self.db.reading():
                row = conn.execute("SELECT meta, items, size, next FROM conversations WHERE id = ? AND owner = ? "
                                   "AND expires > ?", (conversation_id, owner, time.time())).fetchone()
                if row is None:
                    return None
                meta, count, size, position = row
                whole = since is None or not since.unbroken(position, count)
                first = 0 if whole or since is None else since.next  # (an item's seq: ``next`` when it was added)
                bodies = conn.execute("SELECT body FROM conversation_items WHERE conversation = ? AND seq >= ? "
                                      "ORDER BY seq", (conversation_id, first)).fetchall()
            conversation = StoredConversation.decode_meta(conversation_id, meta, count, size)
            return ItemsRead(conversation, [StoredItem.decode(body) for (body,) in bodies], ItemsMark(position, count),
                             whole)

        return await self.db.run(work)


__all__ = ["SCHEMA", "SqliteConversations"]
