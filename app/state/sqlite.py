"""The embedded response store: one SQLite file, used from a worker thread (never the event loop).

Rows expire after ``ttl`` seconds and the table never holds more than ``max_rows`` (the oldest go
first): expired and surplus rows are swept on every hundredth write, so the file stays bounded.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import orjson

SWEEP_EVERY = 100


class SqliteStore:
    def __init__(self, path: Path, ttl: float, max_rows: int) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.ttl = ttl
        self.max_rows = max_rows
        self._lock = threading.Lock()
        self._writes = 0
        self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        with self._lock:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("CREATE TABLE IF NOT EXISTS responses (id TEXT PRIMARY KEY, record BLOB NOT NULL, "
                             "created REAL NOT NULL, expires REAL NOT NULL)")
            self._db.execute("CREATE INDEX IF NOT EXISTS responses_expires ON responses (expires)")
            self._db.execute("CREATE INDEX IF NOT EXISTS responses_created ON responses (created)")

    def _put(self, key: str, record: bytes) -> None:
        now = time.time()
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO responses (id, record, created, expires) VALUES (?, ?, ?, ?)",
                             (key, record, now, now + self.ttl))
            self._writes += 1
            if self._writes % SWEEP_EVERY == 0:
                self._sweep(now)

    def _sweep(self, now: float) -> None:
        self._db.execute("DELETE FROM responses WHERE expires <= ?", (now,))
        self._db.execute("DELETE FROM responses WHERE id IN (SELECT id FROM responses ORDER BY created DESC "
                         "LIMIT -1 OFFSET ?)", (self.max_rows,))

    def _get(self, key: str) -> bytes | None:
        with self._lock:
            row = self._db.execute("SELECT record FROM responses WHERE id = ? AND expires > ?",
                                   (key, time.time())).fetchone()
        return row[0] if row else None

    def _delete(self, key: str) -> bool:
        with self._lock:
            return self._db.execute("DELETE FROM responses WHERE id = ?", (key,)).rowcount > 0

    async def put(self, key: str, record: dict[str, Any]) -> None:
        await asyncio.to_thread(self._put, key, orjson.dumps(record))

    async def get(self, key: str) -> dict[str, Any] | None:
        raw = await asyncio.to_thread(self._get, key)
        return orjson.loads(raw) if raw is not None else None

    async def delete(self, key: str) -> bool:
        return await asyncio.to_thread(self._delete, key)

    async def close(self) -> None:
        with self._lock:
            self._db.close()

    def sweep(self) -> None:
        """Drop expired and surplus rows now (tests; writes do it every ``SWEEP_EVERY``)."""
        with self._lock:
            self._sweep(time.time())
