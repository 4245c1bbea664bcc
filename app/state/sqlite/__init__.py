"""The embedded store: the three stores (``app.state``) on one SQLite file — ``database`` (the
connection, transactions, the shared budget), ``responses``, ``conversations``, ``runs``."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from app.state import Stores
from app.state.base import StoreUnavailable
from app.state.health import Guard
from app.state.sqlite import conversations, responses, runs
from app.state.sqlite.database import WAL_LIMIT, SqliteDatabase
from app.state.sqlite.runs import SqliteRuns


def open_sqlite(path: Path, ttl: float, max_rows: int, max_bytes: int, guard: Guard | None = None) -> Stores:
    """The three stores on the SQLite file ``path`` (created, and brought up to date, as needed)."""
    db = SqliteDatabase(path, ttl, max_rows, max_bytes, (*responses.SCHEMA, *conversations.SCHEMA, *runs.RUN_SCHEMA),
                        guard)
    kept = responses.SqliteResponses(db)
    try:
        with db.lock, db.transaction():
            kept.upgrade(db.existing)
    except (OSError, sqlite3.Error, ValueError) as exc:  # a row that does not decode is a corrupt file
        db.conn.close()
        raise StoreUnavailable(f"the response store {path} cannot be opened: {exc}") from None
    return Stores(kept, conversations.SqliteConversations(db), SqliteRuns(db, kept), db)


__all__ = ["WAL_LIMIT", "SqliteDatabase", "open_sqlite"]
