"""The runs of background responses (``app.state.runs.RunStore``) in the SQLite database.

A run is one row of ``background_runs`` (owner digest, status, heartbeat, event counters, created;
``expires``: its last write plus the time to live) and its log is rows of ``background_events`` (one
per batch, numbered from 0). Runs have their own budget beside the stored responses' (``store_meta``:
``run_rows``, and ``run_bytes``, the bytes of logged events): every write that opens a run or grows
a log drops expired runs and then the least recently written until it holds again. Each operation
is one transaction, like every write of the database; a settled run's response is stored in the
same transaction (through the stored responses' own ``insert`` and the database's ``bound``, so its
rows and bytes count as any stored response's).
"""

from __future__ import annotations

import time

from app.state.responses import Parts, StoredResponse
from app.state.runs import Batch, RunLimits, RunRead, RunState, settle_status
from app.state.sqlite.database import SqliteDatabase
from app.state.sqlite.responses import SqliteResponses

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
    """See the module docstring (``responses``: the stored responses a settled run is stored with)."""

    def __init__(self, db: SqliteDatabase, responses: SqliteResponses) -> None:
        self.db = db
        self.responses = responses
        self.ttl = db.ttl
        self.max_rows = db.max_rows
        self.max_bytes = db.max_bytes

    # ------------------------------------------------------------------ plumbing

    def _run_state(self, response_id: str, owner: str, now: float) -> RunState | None:
        row = self.db.conn.execute(_STATE, (response_id, now)).fetchone()
        if row is None or row[0] != owner:
            return None
        return RunState(row[1], max(0.0, now - row[2]), row[3], row[4], row[5], bool(row[6]), row[7])

    def _run_count(self, rows: int, size: int) -> None:
        self.db.conn.execute("UPDATE store_meta SET value = value + ? WHERE name = 'run_rows'", (rows,))
        self.db.conn.execute("UPDATE store_meta SET value = value + ? WHERE name = 'run_bytes'", (size,))

    def _run_totals(self) -> tuple[int, int]:
        rows = dict(self.db.conn.execute(
            "SELECT name, value FROM store_meta WHERE name IN ('run_rows', 'run_bytes')").fetchall())
        return int(rows["run_rows"]), int(rows["run_bytes"])

    def _drop_run(self, key: str, size: int) -> None:
        self.db.conn.execute("DELETE FROM background_events WHERE run = ?", (key,))
        self.db.conn.execute("DELETE FROM background_runs WHERE id = ?", (key,))
        self._run_count(-1, -size)

    def _bound_runs(self, now: float, keep: str) -> None:
        """Drop expired runs, then the least recently written (never ``keep``, the one being written)
        until the runs' row and byte bounds hold."""
        db = self.db.conn
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
                self.db.conn.execute("INSERT INTO background_events (run, n, data) VALUES (?, ?, ?)",
                                 (response_id, batches, batch.data))
                self._run_count(0, len(batch.data))
                logged, size, batches = logged + batch.count, size + len(batch.data), batches + 1
            else:
                over = True
        self.db.conn.execute("UPDATE background_runs SET status = ?, beat = ?, seq = ?, logged = ?, size = ?, over = ?, "
                         "batches = ?, expires = ? WHERE id = ?",
                         (status, now, batch.end, logged, size, int(over), batches, now + self.ttl, response_id))
        return RunState(status, 0.0, batch.end, logged, size, over, batches)

    def _store(self, record: StoredResponse, owner: str, parts: Parts, now: float) -> None:
        self.responses.insert(record, owner, parts, now, now + self.ttl)
        self.db.bound(now)

    # ------------------------------------------------------------------ the interface

    async def open_run(self, record: StoredResponse, tenant: str, batch: Batch, limits: RunLimits) -> None:
        owner = self.db.owner(tenant)
        parts = record.parts()
        status = str(record.response.get("status") or "queued")

        def work() -> None:
            now = time.time()
            with self.db.transaction():
                self._store(record, owner, parts, now)
                old = self.db.conn.execute("SELECT size FROM background_runs WHERE id = ?", (record.id,)).fetchone()
                if old is not None:
                    self._drop_run(record.id, old[0])
                self.db.conn.execute(
                    "INSERT INTO background_runs (id, owner, status, beat, seq, logged, size, over, batches, created, "
                    "expires) VALUES (?, ?, ?, ?, 0, 0, 0, 0, 0, ?, ?)",
                    (record.id, owner, status, now, now, now + self.ttl))
                self._run_count(1, 0)
                self._log(record.id, RunState(status, 0.0, batch.first), batch, status, limits, now)
                self._bound_runs(now, record.id)

        await self.db.run(work)

    async def append_run(self, response_id: str, tenant: str, batch: Batch, status: str,
                         limits: RunLimits) -> RunState | None:
        owner = self.db.owner(tenant)

        def work() -> RunState | None:
            now = time.time()
            with self.db.transaction():
                state = self._run_state(response_id, owner, now)
                if state is None or state.ended or state.seq != batch.first:
                    return state
                state = self._log(response_id, state, batch, status, limits, now)
                if batch.count:
                    self._bound_runs(now, response_id)
                return state

        return await self.db.run(work)

    async def settle_run(self, response_id: str, tenant: str, batch: Batch, record: StoredResponse,
                         limits: RunLimits, stale: float | None = None,
                         if_cancelled: StoredResponse | None = None) -> RunState | None:
        owner = self.db.owner(tenant)
        status = settle_status(record)
        parts = record.parts()
        cancelled = if_cancelled.parts() if if_cancelled is not None else None

        def work() -> RunState | None:
            now = time.time()
            with self.db.transaction():
                state = self._run_state(response_id, owner, now)
                if state is None:
                    return None
                if state.ended:
                    if state.status == "cancelled" and if_cancelled is not None and self.db.conn.execute(
                            "SELECT 1 FROM stored_responses WHERE id = ? AND owner = ?",
                            (response_id, owner)).fetchone():
                        assert cancelled is not None
                        self._store(if_cancelled, owner, cancelled, now)
                    return state
                if state.seq != batch.first or (stale is not None and state.age < stale):
                    return state
                state = self._log(response_id, state, batch, status, limits, now)
                self._store(record, owner, parts, now)
                self._bound_runs(now, response_id)
                return state

        return await self.db.run(work)

    async def read_run(self, response_id: str, tenant: str, start: int | None) -> RunRead | None:
        owner = self.db.owner(tenant)

        def work() -> RunRead | None:
            now = time.time()
            with self.db.reading():
                state = self._run_state(response_id, owner, now)
                if state is None:
                    return None
                batches = [] if start is None else [bytes(data) for (data,) in self.db.conn.execute(
                    "SELECT data FROM background_events WHERE run = ? AND n >= ? ORDER BY n", (response_id, start))]
            return RunRead(state, batches)

        return await self.db.run(work)

    def totals(self) -> tuple[int, int]:
        """``(runs, bytes of logged events)`` the database holds now (tests and operations)."""
        with self.db.lock:
            return self._run_totals()


__all__ = ["RUN_SCHEMA", "SqliteRuns"]
