"""The embedded response store: one SQLite file, used from worker threads (never the event loop);
large response bodies are decoded after the store's lock is released (``off_loop``), so a big chain
being decoded does not hold up other requests' reads and writes.

Each stored response is one row (owner digest, previous id, body, size), and its items' ids are rows
of ``response_items`` (the item index: id → the response, and whether toolwire wrote the item). A
conversation is one row (owner, its own fields, item count, size) and its items are rows of
``conversation_items`` in order. A small ``store_meta`` table keeps the running row count (stored
responses and conversations) and byte total, and the store's own secret for owner digests. Every
write, in one transaction, drops expired rows and then the oldest (a conversation counts from its
last write) until the store is within its row and byte bounds — so the bounds hold after every
write, whichever worker process wrote (the transaction serialises them). The write-ahead log is
truncated back to ``WAL_LIMIT`` after each checkpoint, so a burst of writes does not leave a large
file behind.

Every SQLite failure (disk full, a file that is not a database, a locked file past the busy
timeout) is ``StoreUnavailable``. Every operation runs through the store's ``Guard``
(``app.state.health``): refused at once while its breaker is open. It has no time bound of its own
by default: a local file answers or fails, the busy timeout bounds a wait for another process, and
a worker thread cannot be stopped halfway through a transaction anyway.
"""

from __future__ import annotations

import asyncio
import secrets
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

from app.state.conversations import (
    Appended,
    ConversationLimits,
    Found,
    ItemPage,
    StoredConversation,
    StoredItem,
    found_items,
    plan_append,
    response_items,
)
from app.state.health import Breaker, Guard
from app.state.records import (
    Chain,
    ChainLimits,
    Link,
    StoredResponse,
    StoreUnavailable,
    decode_chain,
    off_loop,
    owner_digest,
    walk,
)
from app.state.sqlite_runs import RUN_SCHEMA, SqliteRuns

T = TypeVar("T")

#: bytes the write-ahead log is truncated to after a checkpoint
WAL_LIMIT = 4 << 20
#: seconds a writer waits for another process's transaction before giving up
BUSY_TIMEOUT = 10.0

_SCHEMA = (
    ("CREATE TABLE IF NOT EXISTS stored_responses (id TEXT PRIMARY KEY, owner TEXT NOT NULL, previous TEXT, "
     "body BLOB NOT NULL, size INTEGER NOT NULL, created REAL NOT NULL, expires REAL NOT NULL)"),
    "CREATE INDEX IF NOT EXISTS stored_responses_created ON stored_responses (created)",
    "CREATE INDEX IF NOT EXISTS stored_responses_expires ON stored_responses (expires)",
    "CREATE TABLE IF NOT EXISTS store_meta (name TEXT PRIMARY KEY, value)",
    "INSERT OR IGNORE INTO store_meta (name, value) VALUES ('rows', 0), ('bytes', 0)",
    ("CREATE TABLE IF NOT EXISTS response_items (item TEXT NOT NULL, response TEXT NOT NULL, "
     "trusted INTEGER NOT NULL, PRIMARY KEY (response, item))"),
    "CREATE INDEX IF NOT EXISTS response_items_item ON response_items (item)",
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

#: ids per ``IN (…)`` list (SQLite's bound on parameters of one statement)
_BATCH = 500

_CHAIN = """
WITH RECURSIVE walk(id, owner, previous, size, depth) AS (
    SELECT id, owner, previous, size, 0 FROM stored_responses WHERE id = ? AND expires > ?
    UNION ALL
    SELECT r.id, r.owner, r.previous, r.size, w.depth + 1 FROM stored_responses r JOIN walk w ON r.id = w.previous
    WHERE r.expires > ? AND w.depth < ? AND w.owner = ?
)
SELECT id, owner, previous, size FROM walk
"""


class SqliteStore(SqliteRuns):
    """See the module docstring; the runs of background responses: ``app.state.sqlite_runs``."""

    def __init__(self, path: Path, ttl: float, max_rows: int, max_bytes: int, guard: Guard | None = None) -> None:
        self.path = path
        self.guard = guard or Guard(Breaker(), None)
        self.ttl = ttl
        self.max_rows = max_rows
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(str(path), timeout=BUSY_TIMEOUT, check_same_thread=False,
                                       isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(f"PRAGMA journal_size_limit={WAL_LIMIT}")
            with self._transaction():
                indexed = self._has_table("response_items")
                for statement in (*_SCHEMA, *RUN_SCHEMA):
                    self._db.execute(statement)
                self._db.execute("INSERT OR IGNORE INTO store_meta (name, value) VALUES ('owner_secret', ?)",
                                 (secrets.token_bytes(32),))
                self._migrate()
                if not indexed:
                    self._index_stored()
            self._secret: bytes = self._db.execute(
                "SELECT value FROM store_meta WHERE name = 'owner_secret'").fetchone()[0]
        except (OSError, sqlite3.Error) as exc:
            raise StoreUnavailable(f"the response store {path} cannot be opened: {exc}") from None

    # ------------------------------------------------------------------ plumbing

    def _transaction(self) -> _Transaction:
        return _Transaction(self._db)

    def _has_table(self, name: str) -> bool:
        return self._db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
                                (name,)).fetchone() is not None

    def _migrate(self) -> None:
        """Rows of the store before owners (one tenant) become rows of the tenant without a key."""
        if not self._has_table("responses"):
            return
        secret = self._db.execute("SELECT value FROM store_meta WHERE name = 'owner_secret'").fetchone()[0]
        owner = owner_digest(secret, "")
        for key, body, created, expires in self._db.execute("SELECT id, record, created, expires FROM responses"):
            record = StoredResponse.decode(key, owner, body)
            self._insert(record, owner, bytes(body), created, expires)
        self._db.execute("DROP TABLE responses")

    def _index_stored(self) -> None:
        """Index the items of responses stored before the item index existed."""
        for key, owner, body in self._db.execute("SELECT id, owner, body FROM stored_responses").fetchall():
            record = StoredResponse.decode(key, owner, body)
            self._index(record)

    def _index(self, record: StoredResponse) -> None:
        self._db.executemany("INSERT OR REPLACE INTO response_items (item, response, trusted) VALUES (?, ?, ?)",
                             [(item, record.id, int(trusted))
                              for item, trusted in response_items(record.response, record.input)])

    async def _run(self, work: Callable[[], T]) -> T:
        def locked() -> T:
            with self._lock:
                try:
                    return work()
                except sqlite3.Error as exc:
                    raise StoreUnavailable(f"the response store failed: {exc}") from None

        return await self.guard.run(asyncio.to_thread(locked))

    def _insert(self, record: StoredResponse, owner: str, body: bytes, created: float, expires: float) -> None:
        db = self._db
        old = db.execute("SELECT size FROM stored_responses WHERE id = ?", (record.id,)).fetchone()
        if old is not None:
            self._drop_response(record.id, old[0])
        db.execute("INSERT INTO stored_responses (id, owner, previous, body, size, created, expires) "
                   "VALUES (?, ?, ?, ?, ?, ?, ?)",
                   (record.id, owner, record.previous_response_id, body, len(body), created, expires))
        self._index(record)
        self._count(1, len(body))

    def _drop_response(self, key: str, size: int) -> None:
        self._db.execute("DELETE FROM response_items WHERE response = ?", (key,))
        self._db.execute("DELETE FROM stored_responses WHERE id = ?", (key,))
        self._count(-1, -size)

    def _drop_conversation(self, key: str, size: int) -> None:
        self._db.execute("DELETE FROM conversation_items WHERE conversation = ?", (key,))
        self._db.execute("DELETE FROM conversations WHERE id = ?", (key,))
        self._count(-1, -size)

    def _count(self, rows: int, size: int) -> None:
        self._db.execute("UPDATE store_meta SET value = value + ? WHERE name = 'rows'", (rows,))
        self._db.execute("UPDATE store_meta SET value = value + ? WHERE name = 'bytes'", (size,))

    def _totals(self) -> tuple[int, int]:
        rows = dict(self._db.execute("SELECT name, value FROM store_meta WHERE name IN ('rows', 'bytes')").fetchall())
        return int(rows["rows"]), int(rows["bytes"])

    def _bound(self, now: float) -> None:
        """Drop expired rows, then the oldest until the row and byte bounds hold."""
        db = self._db
        expired = db.execute("SELECT 'r', id, size FROM stored_responses WHERE expires <= ? UNION ALL "
                             "SELECT 'c', id, size FROM conversations WHERE expires <= ?", (now, now)).fetchall()
        for kind, key, size in expired:
            (self._drop_response if kind == "r" else self._drop_conversation)(key, size)
        rows, size = self._totals()
        while rows > self.max_rows or size > self.max_bytes:
            batch = db.execute("SELECT 'r', id, size, created FROM stored_responses UNION ALL "
                               "SELECT 'c', id, size, updated FROM conversations ORDER BY 4 LIMIT ?",
                               (max(1, rows - self.max_rows, 16),)).fetchall()
            if not batch:
                break
            for kind, key, bytes_, _ in batch:
                if rows <= self.max_rows and size <= self.max_bytes:
                    break
                (self._drop_response if kind == "r" else self._drop_conversation)(key, bytes_)
                rows, size = rows - 1, size - bytes_

    def _conversation(self, conversation_id: str, owner: str, now: float) -> StoredConversation | None:
        row = self._db.execute("SELECT meta, items, size FROM conversations WHERE id = ? AND owner = ? AND expires > ?",
                               (conversation_id, owner, now)).fetchone()
        return StoredConversation.decode_meta(conversation_id, row[0], row[1], row[2]) if row else None

    def _present(self, conversation_id: str, ids: Iterable[str]) -> set[str]:
        present: set[str] = set()
        for chunk in _chunks(list(ids)):
            present.update(key for (key,) in self._db.execute(
                f"SELECT id FROM conversation_items WHERE conversation = ? AND id IN ({_marks(chunk)})",
                (conversation_id, *chunk)))
        return present

    def _append(self, conversation: StoredConversation, items: list[StoredItem], now: float) -> StoredConversation:
        """Add ``items`` (already checked) at the end of a conversation, and renew its time to live."""
        db = self._db
        first = db.execute("SELECT next FROM conversations WHERE id = ?", (conversation.id,)).fetchone()[0]
        rows = [(conversation.id, first + k, item.id, item.encode()) for k, item in enumerate(items)]
        db.executemany("INSERT INTO conversation_items (conversation, seq, id, body) VALUES (?, ?, ?, ?)", rows)
        added = sum(len(row[3]) for row in rows)
        db.execute("UPDATE conversations SET items = items + ?, size = size + ?, next = next + ?, updated = ?, "
                   "expires = ? WHERE id = ?", (len(rows), added, len(rows), now, now + self.ttl, conversation.id))
        self._count(0, added)
        return replace(conversation, items=conversation.items + len(rows), size=conversation.size + added)

    def _cap(self, limits: ConversationLimits) -> ConversationLimits:
        """A conversation never holds more bytes than the whole store may."""
        return ConversationLimits(limits.items, min(limits.bytes, self.max_bytes))

    # ------------------------------------------------------------------ stored responses

    def owner(self, tenant: str) -> str:
        return owner_digest(self._secret, tenant)

    async def put(self, record: StoredResponse, tenant: str) -> None:
        body = record.encode()
        owner = self.owner(tenant)

        def work() -> None:
            now = time.time()
            with self._transaction():
                self._insert(record, owner, body, now, now + self.ttl)
                self._bound(now)

        await self._run(work)

    async def get(self, response_id: str, tenant: str) -> StoredResponse | None:
        owner = self.owner(tenant)

        def work() -> bytes | None:
            row = self._db.execute("SELECT body FROM stored_responses WHERE id = ? AND owner = ? AND expires > ?",
                                   (response_id, owner, time.time())).fetchone()
            return bytes(row[0]) if row else None

        body = await self._run(work)
        return await off_loop(len(body), StoredResponse.decode, response_id, owner, body) if body is not None else None

    async def delete(self, response_id: str, tenant: str) -> bool:
        owner = self.owner(tenant)

        def work() -> bool:
            with self._transaction():
                row = self._db.execute("SELECT size FROM stored_responses WHERE id = ? AND owner = ? AND expires > ?",
                                       (response_id, owner, time.time())).fetchone()
                if row is None:
                    return False
                self._drop_response(response_id, row[0])
                return True

        return await self._run(work)

    async def chain(self, response_id: str, tenant: str, limits: ChainLimits) -> Chain:
        owner = self.owner(tenant)

        def work() -> tuple[Chain, dict[str, bytes]]:
            now = time.time()
            with self._transaction():
                links = {key: Link(key, who, previous, size) for key, who, previous, size in
                         self._db.execute(_CHAIN, (response_id, now, now, limits.links, owner))}
                chain = walk(response_id, links, owner, limits)
                bodies = dict(self._db.execute(
                    f"SELECT id, body FROM stored_responses WHERE id IN ({_marks(chain.ids)})",
                    chain.ids).fetchall()) if chain.ids else {}
            return chain, bodies

        chain, bodies = await self._run(work)  # read under the lock; decoded outside it, off the loop
        return await off_loop(chain.size, decode_chain, chain, owner, bodies, limits)

    async def items(self, ids: Sequence[str], tenant: str, limits: ChainLimits) -> Found:
        owner = self.owner(tenant)

        def work() -> tuple[dict[str, tuple[bool, str, Any]], dict[str, Any]] | None:
            now = time.time()
            best: dict[str, tuple[bool, str, Any]] = {}  # id -> (trusted, kind, response id or item body)
            sizes: dict[str, int] = {}
            with self._transaction():
                for chunk in _chunks(list(dict.fromkeys(ids))):
                    for key, body in self._db.execute(
                            "SELECT ci.id, ci.body FROM conversation_items ci JOIN conversations c "
                            f"ON c.id = ci.conversation WHERE c.owner = ? AND c.expires > ? AND ci.id IN ({_marks(chunk)})",
                            (owner, now, *chunk)):
                        trusted = bytes(body[:1]) == b"1"
                        if key not in best or (trusted and not best[key][0]):
                            best[key] = (trusted, "c", body)
                    for key, response, trusted, size in self._db.execute(
                            "SELECT ri.item, ri.response, ri.trusted, r.size FROM response_items ri JOIN "
                            "stored_responses r ON r.id = ri.response WHERE r.owner = ? AND r.expires > ? "
                            f"AND ri.item IN ({_marks(chunk)})", (owner, now, *chunk)):
                        if key not in best or (trusted and not best[key][0]):
                            best[key] = (bool(trusted), "r", response)
                            sizes[response] = size
                wanted = sorted({holder for _, kind, holder in best.values() if kind == "r"})
                if sum(sizes[key] for key in wanted) > limits.bytes:
                    return None
                bodies: dict[str, Any] = {}
                for chunk in _chunks(wanted):
                    bodies.update(self._db.execute(
                        f"SELECT id, body FROM stored_responses WHERE id IN ({_marks(chunk)})", chunk).fetchall())
            return best, bodies

        chosen = await self._run(work)
        if chosen is None:
            return Found(over=True)
        best, bodies = chosen  # decoded outside the lock, and off the loop when large
        size = sum(map(len, bodies.values())) + sum(len(what) for _, kind, what in best.values() if kind == "c")
        return await off_loop(size, found_items, best, bodies)

    # ------------------------------------------------------------------ conversations

    async def create_conversation(self, conversation: StoredConversation, items: list[StoredItem], tenant: str,
                                  limits: ConversationLimits) -> Appended:
        owner = self.owner(tenant)
        meta = conversation.encode_meta()
        empty = replace(conversation, items=0, size=len(meta))

        def work() -> Appended:
            now = time.time()
            taken, refused = plan_append(empty, items, set(), self._cap(limits), skip_existing=False)
            if refused is not None:
                return refused
            with self._transaction():
                self._db.execute("INSERT INTO conversations (id, owner, meta, items, size, next, updated, expires) "
                                 "VALUES (?, ?, ?, 0, ?, 0, ?, ?)",
                                 (conversation.id, owner, meta, len(meta), now, now + self.ttl))
                self._count(1, len(meta))
                made = self._append(empty, taken, now)
                self._bound(now)
            return Appended(made, [item.id for item in taken])

        return await self._run(work)

    async def get_conversation(self, conversation_id: str, tenant: str) -> StoredConversation | None:
        owner = self.owner(tenant)
        return await self._run(lambda: self._conversation(conversation_id, owner, time.time()))

    async def update_conversation(self, conversation_id: str, tenant: str, metadata: dict[str, Any],
                                  limits: ConversationLimits) -> Appended:
        owner = self.owner(tenant)

        def work() -> Appended:
            now = time.time()
            with self._transaction():
                current = self._conversation(conversation_id, owner, now)
                if current is None:
                    return Appended()
                updated = replace(current, metadata=metadata)
                old, new = len(current.encode_meta()), len(updated.encode_meta())
                updated = replace(updated, size=current.size - old + new)
                if updated.size > self._cap(limits).bytes:
                    return Appended(current, over="bytes")
                self._db.execute("UPDATE conversations SET meta = ?, size = ?, updated = ?, expires = ? WHERE id = ?",
                                 (updated.encode_meta(), updated.size, now, now + self.ttl, conversation_id))
                self._count(0, new - old)
                self._bound(now)
                return Appended(updated)

        return await self._run(work)

    async def delete_conversation(self, conversation_id: str, tenant: str) -> bool:
        owner = self.owner(tenant)

        def work() -> bool:
            with self._transaction():
                current = self._conversation(conversation_id, owner, time.time())
                if current is None:
                    return False
                self._drop_conversation(conversation_id, current.size)
                return True

        return await self._run(work)

    async def add_items(self, conversation_id: str, items: list[StoredItem], tenant: str,
                        limits: ConversationLimits, skip_existing: bool = False) -> Appended:
        owner = self.owner(tenant)

        def work() -> Appended:
            now = time.time()
            with self._transaction():
                current = self._conversation(conversation_id, owner, now)
                if current is None:
                    return Appended()
                present = self._present(conversation_id, (item.id for item in items))
                taken, refused = plan_append(current, items, present, self._cap(limits), skip_existing)
                if refused is not None:
                    return refused
                made = self._append(current, taken, now)
                self._bound(now)
                return Appended(made, [item.id for item in taken])

        return await self._run(work)

    async def list_items(self, conversation_id: str, tenant: str, after: str | None, limit: int,
                         descending: bool) -> ItemPage | None:
        owner = self.owner(tenant)

        def work() -> ItemPage | None:
            with self._transaction():
                if self._conversation(conversation_id, owner, time.time()) is None:
                    return None
                where, args = "conversation = ?", [conversation_id]
                if after:
                    row = self._db.execute("SELECT seq FROM conversation_items WHERE conversation = ? AND id = ?",
                                           (conversation_id, after)).fetchone()
                    if row is None:
                        return ItemPage()
                    where, args = where + (" AND seq < ?" if descending else " AND seq > ?"), [*args, row[0]]
                bodies = [body for (body,) in self._db.execute(
                    f"SELECT body FROM conversation_items WHERE {where} ORDER BY seq {'DESC' if descending else 'ASC'} "
                    "LIMIT ?", (*args, limit + 1))]
            return ItemPage([StoredItem.decode(body) for body in bodies[:limit]], len(bodies) > limit)

        return await self._run(work)

    async def get_item(self, conversation_id: str, item_id: str,
                       tenant: str) -> tuple[StoredConversation | None, StoredItem | None]:
        owner = self.owner(tenant)

        def work() -> tuple[StoredConversation | None, StoredItem | None]:
            with self._transaction():
                current = self._conversation(conversation_id, owner, time.time())
                if current is None:
                    return None, None
                row = self._db.execute("SELECT body FROM conversation_items WHERE conversation = ? AND id = ?",
                                       (conversation_id, item_id)).fetchone()
            return current, StoredItem.decode(row[0]) if row else None

        return await self._run(work)

    async def delete_item(self, conversation_id: str, item_id: str,
                          tenant: str) -> tuple[StoredConversation | None, bool]:
        owner = self.owner(tenant)

        def work() -> tuple[StoredConversation | None, bool]:
            now = time.time()
            with self._transaction():
                current = self._conversation(conversation_id, owner, now)
                if current is None:
                    return None, False
                row = self._db.execute("SELECT length(body) FROM conversation_items WHERE conversation = ? AND id = ?",
                                       (conversation_id, item_id)).fetchone()
                if row is None:
                    return current, False
                self._db.execute("DELETE FROM conversation_items WHERE conversation = ? AND id = ?",
                                 (conversation_id, item_id))
                self._db.execute("UPDATE conversations SET items = items - 1, size = size - ?, updated = ?, "
                                 "expires = ? WHERE id = ?", (row[0], now, now + self.ttl, conversation_id))
                self._count(0, -row[0])
                return replace(current, items=current.items - 1, size=current.size - row[0]), True

        return await self._run(work)

    async def conversation_items(self, conversation_id: str, tenant: str) -> list[StoredItem] | None:
        owner = self.owner(tenant)

        def work() -> list[StoredItem] | None:
            with self._transaction():
                if self._conversation(conversation_id, owner, time.time()) is None:
                    return None
                bodies = self._db.execute("SELECT body FROM conversation_items WHERE conversation = ? ORDER BY seq",
                                          (conversation_id,)).fetchall()
            return [StoredItem.decode(body) for (body,) in bodies]

        return await self._run(work)

    # ------------------------------------------------------------------ health

    async def ping(self) -> bool:
        """Whether the file answers now (past the guard: this is what its checks probe with)."""
        def work() -> None:
            with self._lock:
                self._db.execute("SELECT 1").fetchone()

        try:
            await asyncio.to_thread(work)
        except sqlite3.Error:
            return False
        return True

    async def close(self) -> None:
        with self._lock:
            self._db.close()

    # ------------------------------------------------------------------ tests and operations

    def totals(self) -> tuple[int, int]:
        """``(rows, bytes)`` the store holds now."""
        with self._lock:
            return self._totals()


def _marks(values: Sequence[Any]) -> str:
    return ",".join("?" * len(values))


def _chunks(values: list[str]) -> Iterator[list[str]]:
    for start in range(0, len(values), _BATCH):
        yield values[start:start + _BATCH]


class _Transaction:
    """``BEGIN IMMEDIATE`` … ``COMMIT`` (``ROLLBACK`` on an error): one writer at a time, across processes."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def __enter__(self) -> None:
        self.db.execute("BEGIN IMMEDIATE")

    def __exit__(self, kind: object, exc: object, tb: object) -> None:
        if kind is None:
            self.db.execute("COMMIT")
        else:
            self.db.execute("ROLLBACK")
