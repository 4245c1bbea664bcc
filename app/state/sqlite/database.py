"""The embedded database: one SQLite file, used from worker threads (never the event loop) under
one lock, in transactions: a write in ``BEGIN IMMEDIATE`` (``transaction``: one writer at a time,
across processes), a read of several statements in a deferred one (``reading``: a snapshot of what
was committed, which never waits for another process's writer — a worker or a replica on the same
file in the middle of a write). The three stores on it (``responses``, ``conversations``, ``runs``)
share this connection and its budget.

A small ``store_meta`` table keeps the running count of records (stored responses and
conversations) and their bytes, and the database's own secret for owner digests. Every write, in
its transaction, drops expired records and then the oldest of either kind (a conversation counts
from its last write) until the database is within its record and byte bounds (``bound``) — so the
bounds hold after every write, whichever worker process wrote. The write-ahead log is truncated
back to ``WAL_LIMIT`` after each checkpoint, so a burst of writes does not leave a large file
behind. Commits do not wait for the disk (``synchronous=NORMAL``, SQLite's setting for a write-ahead
log): what a commit wrote survives the process — a crash, a kill — and the file is never left
corrupt, but a power loss or an operating system crash may take back the last commits before a
checkpoint. A stored response is a convenience a client can do without (``store: false``), not a
ledger: the disk's flush per commit cost more than the write itself (~0.07 ms of CPU and ~0.15 ms
of wall time a commit on this project's test machine, ~0.03 and ~0.04 without). Large bodies are
decoded after the lock is released (``off_loop``), so a big chain being decoded does not hold up
other requests' reads and writes.

Every SQLite failure (disk full, a file that is not a database, a locked file past the busy
timeout) is ``StoreUnavailable``. Every operation runs through the database's ``Guard``
(``app.state.health``): refused at once while its breaker is open. It has no time bound of its own
by default: a local file answers or fails, the busy timeout bounds a wait for another process, and
a worker thread cannot be stopped halfway through a transaction anyway.
"""

from __future__ import annotations

import asyncio
import secrets
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

from app.state.base import StoreUnavailable, owner_digest
from app.state.health import Breaker, Guard

T = TypeVar("T")

#: bytes the write-ahead log is truncated to after a checkpoint
WAL_LIMIT = 4 << 20
#: seconds a writer waits for another process's transaction before giving up
BUSY_TIMEOUT = 10.0
#: ids per ``IN (…)`` list (SQLite's bound on parameters of one statement)
BATCH = 500

META_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS store_meta (name TEXT PRIMARY KEY, value)",
    "INSERT OR IGNORE INTO store_meta (name, value) VALUES ('rows', 0), ('bytes', 0)",
)


class SqliteDatabase:
    """See the module docstring. ``schema``: the stores' own statements, run (idempotently) on
    opening; ``existing``: the tables the file held before them."""

    def __init__(self, path: Path, ttl: float, max_rows: int, max_bytes: int, schema: Sequence[str],
                 guard: Guard | None = None) -> None:
        self.path = path
        self.ttl = ttl
        self.max_rows = max_rows
        self.max_bytes = max_bytes
        self.guard = guard or Guard(Breaker(), None)
        self.lock = threading.Lock()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self.conn = sqlite3.connect(str(path), timeout=BUSY_TIMEOUT, check_same_thread=False,
                                        isolation_level=None)
            self.conn.execute("PRAGMA journal_mode=WAL")
            self.conn.execute("PRAGMA synchronous=NORMAL")  # (see the module docstring)
            self.conn.execute(f"PRAGMA journal_size_limit={WAL_LIMIT}")
            with self.transaction():
                self.existing = {name for (name,) in self.conn.execute(
                    "SELECT name FROM sqlite_master WHERE type = 'table'")}
                for statement in (*META_SCHEMA, *schema):
                    self.conn.execute(statement)
                self.conn.execute("INSERT OR IGNORE INTO store_meta (name, value) VALUES ('owner_secret', ?)",
                                  (secrets.token_bytes(32),))
            self.secret: bytes = self.conn.execute(
                "SELECT value FROM store_meta WHERE name = 'owner_secret'").fetchone()[0]
        except (OSError, sqlite3.Error) as exc:
            raise StoreUnavailable(f"the response store {path} cannot be opened: {exc}") from None

    def transaction(self) -> Transaction:
        """A write's transaction: it takes the file's write lock at once (waiting up to the busy timeout)."""
        return Transaction(self.conn)

    def reading(self) -> Transaction:
        """A read's transaction: the statements in it see one snapshot, and no lock is waited for."""
        return Transaction(self.conn, "BEGIN")

    def owner(self, tenant: str) -> str:
        return owner_digest(self.secret, tenant)

    async def run(self, work: Callable[[], T]) -> T:
        """``work`` in a worker thread under the lock, through the guard; a SQLite failure is
        ``StoreUnavailable``."""
        def locked() -> T:
            with self.lock:
                try:
                    return work()
                except sqlite3.Error as exc:
                    raise StoreUnavailable(f"the response store failed: {exc}") from None

        return await self.guard.run(asyncio.to_thread(locked))

    # ------------------------------------------------------------------ the shared budget

    def count(self, rows: int, size: int) -> None:
        """Records and bytes added (or, negative, dropped) in the budget."""
        self.conn.execute("UPDATE store_meta SET value = value + ? WHERE name = 'rows'", (rows,))
        self.conn.execute("UPDATE store_meta SET value = value + ? WHERE name = 'bytes'", (size,))

    def _totals(self) -> tuple[int, int]:
        rows = dict(self.conn.execute("SELECT name, value FROM store_meta WHERE name IN ('rows', 'bytes')").fetchall())
        return int(rows["rows"]), int(rows["bytes"])

    def drop_response(self, key: str, size: int) -> int:
        """Remove a stored response (its owner's count of removals goes up: ``ResponseStore.removals``)
        and its echo when no other response of its owner echoes it; the bytes that freed."""
        conn = self.conn
        conn.execute("INSERT INTO response_removals (owner, n) SELECT owner, 1 FROM stored_responses WHERE id = ? "
                     "ON CONFLICT (owner) DO UPDATE SET n = n + 1", (key,))
        echo = conn.execute("SELECT owner, echo FROM stored_responses WHERE id = ? AND echo IS NOT NULL",
                            (key,)).fetchone()
        conn.execute("DELETE FROM response_items WHERE response = ?", (key,))
        conn.execute("DELETE FROM stored_responses WHERE id = ?", (key,))
        freed = size
        if echo is not None and not conn.execute(
                "SELECT 1 FROM stored_responses WHERE echo = ?2 AND owner = ?1 LIMIT 1", echo).fetchone():
            unused = conn.execute("SELECT length(body) FROM response_echoes WHERE owner = ? AND digest = ?",
                                  echo).fetchone()
            conn.execute("DELETE FROM response_echoes WHERE owner = ? AND digest = ?", echo)
            if unused is not None:
                freed += unused[0]
                self.count(0, -unused[0])
        self.count(-1, -size)
        return freed

    def drop_conversation(self, key: str, size: int) -> int:
        """Remove a conversation and its items; the bytes that freed."""
        self.conn.execute("DELETE FROM conversation_items WHERE conversation = ?", (key,))
        self.conn.execute("DELETE FROM conversations WHERE id = ?", (key,))
        self.count(-1, -size)
        return size

    def bound(self, now: float) -> None:
        """Drop expired records, then the oldest of either kind, until the row and byte bounds hold."""
        db = self.conn
        expired = db.execute("SELECT 'r', id, size FROM stored_responses WHERE expires <= ? UNION ALL "
                             "SELECT 'c', id, size FROM conversations WHERE expires <= ?", (now, now)).fetchall()
        for kind, key, size in expired:
            (self.drop_response if kind == "r" else self.drop_conversation)(key, size)
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
                drop = self.drop_response if kind == "r" else self.drop_conversation
                rows, size = rows - 1, size - drop(key, bytes_)

    # ------------------------------------------------------------------ health

    async def ping(self) -> bool:
        """Whether the file answers now (past the guard: this is what its checks probe with)."""
        def work() -> None:
            with self.lock:
                self.conn.execute("SELECT 1").fetchone()

        try:
            await asyncio.to_thread(work)
        except sqlite3.Error:
            return False
        return True

    async def close(self) -> None:
        with self.lock:
            self.conn.close()

    def totals(self) -> tuple[int, int]:
        """``(records, bytes)`` of stored responses and conversations now (tests and operations)."""
        with self.lock:
            return self._totals()


def marks(values: Sequence[Any]) -> str:
    return ",".join("?" * len(values))


def chunks(values: list[str]) -> Iterator[list[str]]:
    for start in range(0, len(values), BATCH):
        yield values[start:start + BATCH]


class Transaction:
    """``begin`` … ``COMMIT`` (``ROLLBACK`` on an error); ``BEGIN IMMEDIATE`` (a write): one writer
    at a time, across processes."""

    def __init__(self, db: sqlite3.Connection, begin: str = "BEGIN IMMEDIATE") -> None:
        self.db = db
        self.begin = begin

    def __enter__(self) -> None:
        self.db.execute(self.begin)

    def __exit__(self, kind: object, exc: object, tb: object) -> None:
        if kind is None:
            self.db.execute("COMMIT")
        else:
            self.db.execute("ROLLBACK")


__all__ = ["BATCH", "BUSY_TIMEOUT", "WAL_LIMIT", "SqliteDatabase", "Transaction", "chunks", "marks"]
