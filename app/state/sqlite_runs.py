"""The runs of background responses (``app.state.runs``) in the embedded SQLite store.

A run is one row of ``background_runs`` (owner digest, status, heartbeat, event counters, created;
``expires``: its last write plus the time to live) and its log is rows of ``background_events`` (one
per batch, numbered from 0). Runs have their own budget beside the stored responses' (``store_meta``:
``run_rows``, and ``run_bytes``, the bytes of logged events): every write that opens a run or grows
a log drops expired runs and then the least recently written until it holds again. Each operation
is one transaction, like every write of the store; a settled run's response is stored in the same
transaction (through the store's own ``_insert`` and ``_bound``, so its rows and bytes count as any
stored response's).
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TypeVar

from app.state.records import StoredResponse
from app.state.runs import Batch, RunLimits, RunRead, RunState, settle_status

T = TypeVar("T")

RUN_SCHEMA = (
    ("CREATE TABLE IF NOT EXISTS background_runs (id TEXT PRIMARY KEY, owner TEXT NOT NULL, status TEXT NOT NULL, "
     "beat REAL NOT NULL, seq INTEGER NOT NULL, logged INTEGER NOT NULL, size INTEGER NOT NULL, "
     "over INTEGER NOT NULL, batches INTEGER NOT NULL, created REAL NOT NULL, expires REAL NOT NULL)"),
    "CREATE INDEX IF NOT EXISTS background_runs_expires ON background_runs (expires)",
    ("CREATE TABLE IF NOT EXISTS background_events (run TEXT NOT NULL, n INTEGER NOT NULL, data BLOB NOT NULL, "
     "PRIMARY KEY (run, n))"),
    "INSERT OR IGNORE INTO store_meta (name, value) VALUES ('run_rows', 0), ('run_bytes', 0)",
)

_STATE = ("SELECT owner, status, beat, seq, logged, size, over, batches FROM background_runs "
          "WHERE id = ? AND expires > ?")


class SqliteRuns:
    """The run operations of ``SqliteStore`` (which provides the connection and the plumbing below)."""

    _db: sqlite3.Connection
    _lock: threading.Lock
    ttl: float
    max_rows: int
    max_bytes: int

    def owner(self, tenant: str) -> str:
        raise NotImplementedError

    async def _run(self, work: Callable[[], T]) -> T:
        raise NotImplementedError

    def _transaction(self) -> AbstractContextManager[None]:
        raise NotImplementedError

    def _insert(self, record: StoredResponse, owner: str, body: bytes, created: float, expires: float) -> None:
        raise NotImplementedError

    def _bound(self, now: float) -> None:
        raise NotImplementedError

    # ------------------------------------------------------------------ plumbing

    def _run_state(self, response_id: str, owner: str, now: float) -> RunState | None:
        row = self._db.execute(_STATE, (response_id, now)).fetchone()
        if row is None or row[0] != owner:
            return None
        return RunState(row[1], max(0.0, now - row[2]), row[3], row[4], row[5], bool(row[6]), row[7])

    def _run_count(self, rows: int, size: int) -> None:
        self._db.execute("UPDATE store_meta SET value = value + ? WHERE name = 'run_rows'", (rows,))
        self._db.execute("UPDATE store_meta SET value = value + ? WHERE name = 'run_bytes'", (size,))

    def _run_totals(self) -> tuple[int, int]:
        rows = dict(self._db.execute(
            "SELECT name, value FROM store_meta WHERE name IN ('run_rows', 'run_bytes')").fetchall())
        return int(rows["run_rows"]), int(rows["run_bytes"])

    def _drop_run(self, key: str, size: int) -> None:
        self._db.execute("DELETE FROM background_events WHERE run = ?", (key,))
        self._db.execute("DELETE FROM background_runs WHERE id = ?", (key,))
        self._run_count(-1, -size)

    def _bound_runs(self, now: float, keep: str) -> None:
        """Drop expired runs, then the least recently written (never ``keep``, the one being written)
        until the runs' row and byte bounds hold."""
        db = self._db
        for key, size in db.execute("SELECT id, size FROM background_runs WHERE expires <= ? AND id != ?",
                                    (now, keep)).fetchall():
            self._drop_run(key, size)
        rows, size = self._run_totals()
        while rows > self.max_rows or size > self.max_bytes:
            oldest = db.execute("SELECT id, size FROM background_runs WHERE id != ? ORDER BY expires LIMIT 16",
                                (keep,)).fetchall()
            if not oldest:
                break
            for key, bytes_ in oldest:
                if rows <= self.max_rows and size <= self.max_bytes:
                    break
                self._drop_run(key, bytes_)
                rows, size = rows - 1, size - bytes_

    def _log(self, response_id: str, state: RunState, batch: Batch, status: str, limits: RunLimits,
             now: float) -> RunState:
        """Log ``batch`` where the log ends (within the bound), set ``status``, stamp the heartbeat."""
        logged, size, over, batches = state.logged, state.size, state.over, state.batches
        if batch.count:
            if not over and size + len(batch.data) <= limits.events:
                self._db.execute("INSERT INTO background_events (run, n, data) VALUES (?, ?, ?)",
                                 (response_id, batches, batch.data))
                self._run_count(0, len(batch.data))
                logged, size, batches = logged + batch.count, size + len(batch.data), batches + 1
            else:
                over = True
        self._db.execute("UPDATE background_runs SET status = ?, beat = ?, seq = ?, logged = ?, size = ?, over = ?, "
                         "batches = ?, expires = ? WHERE id = ?",
                         (status, now, batch.end, logged, size, int(over), batches, now + self.ttl, response_id))
        return RunState(status, 0.0, batch.end, logged, size, over, batches)

    def _store(self, record: StoredResponse, owner: str, body: bytes, now: float) -> None:
        self._insert(record, owner, body, now, now + self.ttl)
        self._bound(now)

    # ------------------------------------------------------------------ the interface

    async def open_run(self, record: StoredResponse, tenant: str, batch: Batch, limits: RunLimits) -> None:
        owner = self.owner(tenant)
        body = record.encode()
        status = str(record.response.get("status") or "queued")

        def work() -> None:
            now = time.time()
            with self._transaction():
                self._store(record, owner, body, now)
                old = self._db.execute("SELECT size FROM background_runs WHERE id = ?", (record.id,)).fetchone()
                if old is not None:
                    self._drop_run(record.id, old[0])
                self._db.execute(
                    "INSERT INTO background_runs (id, owner, status, beat, seq, logged, size, over, batches, created, "
                    "expires) VALUES (?, ?, ?, ?, 0, 0, 0, 0, 0, ?, ?)",
                    (record.id, owner, status, now, now, now + self.ttl))
                self._run_count(1, 0)
                self._log(record.id, RunState(status, 0.0, batch.first), batch, status, limits, now)
                self._bound_runs(now, record.id)

        await self._run(work)

    async def append_run(self, response_id: str, tenant: str, batch: Batch, status: str,
                         limits: RunLimits) -> RunState | None:
        owner = self.owner(tenant)

        def work() -> RunState | None:
            now = time.time()
            with self._transaction():
                state = self._run_state(response_id, owner, now)
                if state is None or state.ended or state.seq != batch.first:
                    return state
                state = self._log(response_id, state, batch, status, limits, now)
                if batch.count:
                    self._bound_runs(now, response_id)
                return state

        return await self._run(work)

    async def settle_run(self, response_id: str, tenant: str, batch: Batch, record: StoredResponse,
                         limits: RunLimits, stale: float | None = None,
                         if_cancelled: StoredResponse | None = None) -> RunState | None:
        owner = self.owner(tenant)
        status = settle_status(record)
        body = record.encode()
        cancelled_body = if_cancelled.encode() if if_cancelled is not None else b""

        def work() -> RunState | None:
            now = time.time()
            with self._transaction():
                state = self._run_state(response_id, owner, now)
                if state is None:
                    return None
                if state.ended:
                    if state.status == "cancelled" and if_cancelled is not None and self._db.execute(
                            "SELECT 1 FROM stored_responses WHERE id = ? AND owner = ?",
                            (response_id, owner)).fetchone():
                        self._store(if_cancelled, owner, cancelled_body, now)
                    return state
                if state.seq != batch.first or (stale is not None and state.age < stale):
                    return state
                state = self._log(response_id, state, batch, status, limits, now)
                self._store(record, owner, body, now)
                self._bound_runs(now, response_id)
                return state

        return await self._run(work)

    async def read_run(self, response_id: str, tenant: str, start: int | None) -> RunRead | None:
        owner = self.owner(tenant)

        def work() -> RunRead | None:
            now = time.time()
            with self._transaction():
                state = self._run_state(response_id, owner, now)
                if state is None:
                    return None
                batches = [] if start is None else [bytes(data) for (data,) in self._db.execute(
                    "SELECT data FROM background_events WHERE run = ? AND n >= ? ORDER BY n", (response_id, start))]
            return RunRead(state, batches)

        return await self._run(work)

    def run_totals(self) -> tuple[int, int]:
        """``(runs, bytes of logged events)`` the store holds now (tests and operations)."""
        with self._lock:
            return self._run_totals()
