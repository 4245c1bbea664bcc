"""The embedded response store: one SQLite file, used from worker threads (never the event loop);
large bodies are decoded after the store's lock is released (``off_loop``), so a big chain being
decoded does not hold up other requests' reads and writes.

Each record is one row (owner digest, previous id, body, size); a small ``store_meta`` table keeps
the running row count and byte total, and the store's own secret for owner digests. Every write,
in one transaction, drops expired rows and then the oldest rows until the store is within its
row and byte bounds — so the bounds hold after every write, whichever worker process wrote (the
transaction serialises them). The write-ahead log is truncated back to ``WAL_LIMIT`` after each
checkpoint, so a burst of writes does not leave a large file behind.

Every SQLite failure (disk full, a file that is not a database, a locked file past the busy
timeout) is ``StoreUnavailable``.
"""

from __future__ import annotations

import asyncio
import secrets
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

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
)

_CHAIN = """
WITH RECURSIVE walk(id, owner, previous, size, depth) AS (
    SELECT id, owner, previous, size, 0 FROM stored_responses WHERE id = ? AND expires > ?
    UNION ALL
    SELECT r.id, r.owner, r.previous, r.size, w.depth + 1 FROM stored_responses r JOIN walk w ON r.id = w.previous
    WHERE r.expires > ? AND w.depth < ? AND w.owner = ?
)
SELECT id, owner, previous, size FROM walk
"""


class SqliteStore:
    """See the module docstring."""

    def __init__(self, path: Path, ttl: float, max_rows: int, max_bytes: int) -> None:
        self.path = path
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
                for statement in _SCHEMA:
                    self._db.execute(statement)
                self._db.execute("INSERT OR IGNORE INTO store_meta (name, value) VALUES ('owner_secret', ?)",
                                 (secrets.token_bytes(32),))
                self._migrate()
            self._secret: bytes = self._db.execute(
                "SELECT value FROM store_meta WHERE name = 'owner_secret'").fetchone()[0]
        except (OSError, sqlite3.Error) as exc:
            raise StoreUnavailable(f"the response store {path} cannot be opened: {exc}") from None

    # ------------------------------------------------------------------ plumbing

    def _transaction(self) -> _Transaction:
        return _Transaction(self._db)

    def _migrate(self) -> None:
        """Rows of the store before owners (one tenant) become rows of the tenant without a key."""
        old = self._db.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'responses'").fetchone()
        if old is None:
            return
        secret = self._db.execute("SELECT value FROM store_meta WHERE name = 'owner_secret'").fetchone()[0]
        owner = owner_digest(secret, "")
        for key, body, created, expires in self._db.execute("SELECT id, record, created, expires FROM responses"):
            record = StoredResponse.decode(key, owner, body)
            self._insert(record, owner, bytes(body), created, expires)
        self._db.execute("DROP TABLE responses")

    async def _run(self, work: Callable[[], T]) -> T:
        def locked() -> T:
            with self._lock:
                try:
                    return work()
                except sqlite3.Error as exc:
                    raise StoreUnavailable(f"the response store failed: {exc}") from None

        return await asyncio.to_thread(locked)

    def _insert(self, record: StoredResponse, owner: str, body: bytes, created: float, expires: float) -> None:
        db = self._db
        old = db.execute("SELECT size FROM stored_responses WHERE id = ?", (record.id,)).fetchone()
        if old is not None:
            db.execute("DELETE FROM stored_responses WHERE id = ?", (record.id,))
            self._count(-1, -old[0])
        db.execute("INSERT INTO stored_responses (id, owner, previous, body, size, created, expires) "
                   "VALUES (?, ?, ?, ?, ?, ?, ?)",
                   (record.id, owner, record.previous_response_id, body, len(body), created, expires))
        self._count(1, len(body))

    def _count(self, rows: int, size: int) -> None:
        self._db.execute("UPDATE store_meta SET value = value + ? WHERE name = 'rows'", (rows,))
        self._db.execute("UPDATE store_meta SET value = value + ? WHERE name = 'bytes'", (size,))

    def _totals(self) -> tuple[int, int]:
        rows = dict(self._db.execute("SELECT name, value FROM store_meta WHERE name IN ('rows', 'bytes')").fetchall())
        return int(rows["rows"]), int(rows["bytes"])

    def _bound(self, now: float) -> None:
        """Drop expired rows, then the oldest until the row and byte bounds hold."""
        db = self._db
        expired = db.execute("SELECT COUNT(*), COALESCE(SUM(size), 0) FROM stored_responses WHERE expires <= ?",
                             (now,)).fetchone()
        if expired[0]:
            db.execute("DELETE FROM stored_responses WHERE expires <= ?", (now,))
            self._count(-expired[0], -expired[1])
        rows, size = self._totals()
        while rows > self.max_rows or size > self.max_bytes:
            batch = db.execute("SELECT id, size FROM stored_responses ORDER BY created LIMIT ?",
                               (max(1, rows - self.max_rows, 16),)).fetchall()
            if not batch:
                break
            for key, bytes_ in batch:
                if rows <= self.max_rows and size <= self.max_bytes:
                    break
                db.execute("DELETE FROM stored_responses WHERE id = ?", (key,))
                self._count(-1, -bytes_)
                rows, size = rows - 1, size - bytes_

    # ------------------------------------------------------------------ the interface

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
                self._db.execute("DELETE FROM stored_responses WHERE id = ?", (response_id,))
                self._count(-1, -row[0])
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
                    f"SELECT id, body FROM stored_responses WHERE id IN ({','.join('?' * len(chain.ids))})",
                    chain.ids).fetchall()) if chain.ids else {}
            return chain, bodies

        chain, bodies = await self._run(work)  # read under the lock; decoded outside it, off the loop
        return await off_loop(chain.size, decode_chain, chain, owner, bodies, limits)

    async def ping(self) -> bool:
        try:
            await self._run(lambda: self._db.execute("SELECT 1").fetchone())
        except StoreUnavailable:
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
