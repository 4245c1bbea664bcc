"""Stored responses (``app.state.responses.ResponseStore``) in the SQLite database.

Each stored response is one row of ``stored_responses`` (owner digest, previous id, body, size,
times, the digest of its echo), what it echoes one row of ``response_echoes`` (owner, digest, body:
shared by the owner's responses that echo the same, dropped with the last of them — an index on the
digest answers whether one is left), and its items' ids are rows of ``response_items`` (the item
index: id → the response, and whether toolwire wrote the item). A chain is one recursive query; the
item index is read with the conversations' items in one transaction. Files from before owners (a
``responses`` table: one tenant), from before the item index and from before echoes were kept
apart are brought up to date on opening (``upgrade``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from app.state.base import off_loop, owner_digest
from app.state.items import Found, found_items, response_items
from app.state.responses import Chain, ChainLimits, Link, Parts, StoredResponse, decode_chain, decode_record, walk
from app.state.sqlite.database import SqliteDatabase, chunks, marks

SCHEMA = (
    ("CREATE TABLE IF NOT EXISTS stored_responses (id TEXT PRIMARY KEY, owner TEXT NOT NULL, previous TEXT, "
     "body BLOB NOT NULL, size INTEGER NOT NULL, created REAL NOT NULL, expires REAL NOT NULL, echo BLOB)"),
    ("CREATE TABLE IF NOT EXISTS response_echoes (owner TEXT NOT NULL, digest BLOB NOT NULL, body BLOB NOT NULL, "
     "PRIMARY KEY (owner, digest))"),
    "CREATE INDEX IF NOT EXISTS stored_responses_created ON stored_responses (created)",
    "CREATE INDEX IF NOT EXISTS stored_responses_expires ON stored_responses (expires)",
    ("CREATE TABLE IF NOT EXISTS response_items (item TEXT NOT NULL, response TEXT NOT NULL, "
     "trusted INTEGER NOT NULL, PRIMARY KEY (response, item))"),
    "CREATE INDEX IF NOT EXISTS response_items_item ON response_items (item)",
    "CREATE TABLE IF NOT EXISTS response_removals (owner TEXT PRIMARY KEY, n INTEGER NOT NULL)",
)

_CHAIN = """
WITH RECURSIVE walk(id, owner, previous, size, expires, depth) AS (
    SELECT id, owner, previous, size, expires, 0 FROM stored_responses WHERE id = ? AND expires > ?
    UNION ALL
    SELECT r.id, r.owner, r.previous, r.size, r.expires, w.depth + 1 FROM stored_responses r
    JOIN walk w ON r.id = w.previous WHERE r.expires > ? AND w.depth < ? AND w.owner = ?
)
SELECT id, owner, previous, size, expires FROM walk
"""
_REMOVALS = "SELECT coalesce((SELECT n FROM response_removals WHERE owner = ?), 0)"


#: a stored response's echo, when it was kept apart (``StoredResponse.parts``)
_ECHO_JOIN = "LEFT JOIN response_echoes e ON e.owner = r.owner AND e.digest = r.echo"


class SqliteResponses:
    """See the module docstring."""

    def __init__(self, db: SqliteDatabase) -> None:
        self.db = db

    # ------------------------------------------------------------------ plumbing (in a transaction)

    def upgrade(self, existing: set[str]) -> None:
        """Bring a file from before owners, before the item index or before echoes were kept apart
        up to date (``existing``: the tables it held before the schema ran)."""
        conn = self.db.conn
        if "stored_responses" in existing and "echo" not in {
                row[1] for row in conn.execute("PRAGMA table_info(stored_responses)")}:
            conn.execute("ALTER TABLE stored_responses ADD COLUMN echo BLOB")  # its rows keep their echoes
        conn.execute("CREATE INDEX IF NOT EXISTS stored_responses_echo ON stored_responses (echo) "
                     "WHERE echo IS NOT NULL")  # (whether a response still echoes it: ``drop_response``)
        if "responses" in existing:  # before owners: the rows become the tenant without a key's
            owner = owner_digest(self.db.secret, "")
            for key, body, created, expires in conn.execute("SELECT id, record, created, expires FROM responses"):
                record = StoredResponse.decode(key, owner, body)
                self.insert(record, owner, record.parts(), created, expires)
            conn.execute("DROP TABLE responses")
        if "response_items" not in existing:  # index the items of responses stored before the index
            for key, owner, body in conn.execute("SELECT id, owner, body FROM stored_responses").fetchall():
                self._index(StoredResponse.decode(key, owner, body))

    def _index(self, record: StoredResponse) -> None:
        self.db.conn.executemany("INSERT OR REPLACE INTO response_items (item, response, trusted) VALUES (?, ?, ?)",
                                 [(item, record.id, int(trusted))
                                  for item, trusted in response_items(record.response, record.input)])

    def insert(self, record: StoredResponse, owner: str, parts: Parts, created: float, expires: float) -> None:
        """Store ``record`` as ``parts`` (``StoredResponse.parts``: its echo kept once per owner and
        content, counted in the budget once) replacing one with its id, and index its items."""
        conn = self.db.conn
        old = conn.execute("SELECT size FROM stored_responses WHERE id = ?", (record.id,)).fetchone()
        if old is not None:
            self.db.drop_response(record.id, old[0])
        body, echo, digest = parts
        if echo is not None and conn.execute("INSERT OR IGNORE INTO response_echoes (owner, digest, body) "
                                             "VALUES (?, ?, ?)", (owner, digest, echo)).rowcount:  # the first
            self.db.count(0, len(echo))
        conn.execute("INSERT INTO stored_responses (id, owner, previous, body, size, created, expires, echo) "
                     "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                     (record.id, owner, record.previous_response_id, body, len(body), created, expires, digest))
        self._index(record)
        self.db.count(1, len(body))

    # ------------------------------------------------------------------ the interface

    async def put(self, record: StoredResponse, tenant: str) -> None:
        parts = record.parts()
        owner = self.db.owner(tenant)

        def work() -> None:
            now = time.time()
            with self.db.transaction():
                self.insert(record, owner, parts, now, now + self.db.ttl)
                self.db.bound(now)

        await self.db.run(work)

    async def get(self, response_id: str, tenant: str) -> StoredResponse | None:
        owner = self.db.owner(tenant)

        def work() -> tuple[bytes, bytes | None] | None:
            row = self.db.conn.execute(
                f"SELECT r.body, e.body FROM stored_responses r {_ECHO_JOIN} WHERE r.id = ? AND r.owner = ? "
                "AND r.expires > ?", (response_id, owner, time.time())).fetchone()
            return (bytes(row[0]), row[1]) if row else None

        found = await self.db.run(work)
        if found is None:
            return None
        body, echo = found
        return await off_loop(len(body) + len(echo or b""), decode_record, response_id, owner, body, echo)

    async def delete(self, response_id: str, tenant: str) -> bool:
        owner = self.db.owner(tenant)

        def work() -> bool:
            with self.db.transaction():
                row = self.db.conn.execute(
                    "SELECT size FROM stored_responses WHERE id = ? AND owner = ? AND expires > ?",
                    (response_id, owner, time.time())).fetchone()
                if row is None:
                    return False
                self.db.drop_response(response_id, row[0])
                return True

        return await self.db.run(work)

    async def chain(self, response_id: str, tenant: str, limits: ChainLimits) -> Chain:
        owner = self.db.owner(tenant)

        def work() -> tuple[Chain, dict[str, bytes], dict[str, bytes]]:
            now = time.time()
            conn = self.db.conn
            with self.db.reading():
                links = {key: Link(key, who, previous, size) for key, who, previous, size, _ in
                         conn.execute(_CHAIN, (response_id, now, now, limits.links, owner))}
                chain = walk(response_id, links, owner, limits)
                rows = conn.execute(f"SELECT id, body, echo FROM stored_responses WHERE id IN ({marks(chain.ids)})",
                                    chain.ids).fetchall() if chain.ids else []
                digests = list({digest for _, _, digest in rows if digest is not None})
                shared = dict(conn.execute(  # each different echo read once (the chain's are mostly one)
                    f"SELECT digest, body FROM response_echoes WHERE owner = ? AND digest IN ({marks(digests)})",
                    (owner, *digests)).fetchall()) if digests else {}
            echoes = {key: shared[digest] for key, _, digest in rows if digest is not None}
            return chain, {key: body for key, body, _ in rows}, echoes

        chain, bodies, echoes = await self.db.run(work)  # read under the lock; decoded outside it, off the loop
        return await off_loop(chain.size + sum(map(len, set(echoes.values()))), decode_chain, chain, owner, bodies,
                              limits, echoes)

    async def links(self, response_id: str, tenant: str, limits: ChainLimits) -> Chain:
        owner = self.db.owner(tenant)

        def work() -> Chain:
            now = time.time()
            conn = self.db.conn
            with self.db.reading():
                rows = conn.execute(_CHAIN, (response_id, now, now, limits.links, owner)).fetchall()
                removals = conn.execute(_REMOVALS, (owner,)).fetchone()[0]
            chain = walk(response_id, {key: Link(key, who, previous, size) for key, who, previous, size, _ in rows},
                         owner, limits)
            expiry = {row[0]: row[4] for row in rows}
            chain.removals = int(removals)
            chain.expires = min((expiry[key] for key in chain.ids), default=0.0)
            return chain

        return await self.db.run(work)

    async def removals(self, response_id: str, tenant: str) -> int | None:
        owner = self.db.owner(tenant)

        def work() -> int | None:
            conn = self.db.conn
            with self.db.reading():
                there = conn.execute("SELECT 1 FROM stored_responses WHERE id = ? AND owner = ? AND expires > ?",
                                     (response_id, owner, time.time())).fetchone()
                return int(conn.execute(_REMOVALS, (owner,)).fetchone()[0]) if there else None

        return await self.db.run(work)

    async def items(self, ids: Sequence[str], tenant: str, limits: ChainLimits) -> Found:
        owner = self.db.owner(tenant)

        def work() -> tuple[dict[str, tuple[bool, str, Any]], dict[str, Any]] | None:
            now = time.time()
            conn = self.db.conn
            best: dict[str, tuple[bool, str, Any]] = {}  # id -> (trusted, kind, response id or item body)
            sizes: dict[str, int] = {}
            with self.db.reading():
                for chunk in chunks(list(dict.fromkeys(ids))):
                    for key, body in conn.execute(
                            "SELECT ci.id, ci.body FROM conversation_items ci JOIN conversations c "
                            f"ON c.id = ci.conversation WHERE c.owner = ? AND c.expires > ? AND ci.id IN ({marks(chunk)})",
                            (owner, now, *chunk)):
                        trusted = bytes(body[:1]) == b"1"
                        if key not in best or (trusted and not best[key][0]):
                            best[key] = (trusted, "c", body)
                    for key, response, trusted, size in conn.execute(
                            "SELECT ri.item, ri.response, ri.trusted, r.size FROM response_items ri JOIN "
                            "stored_responses r ON r.id = ri.response WHERE r.owner = ? AND r.expires > ? "
                            f"AND ri.item IN ({marks(chunk)})", (owner, now, *chunk)):
                        if key not in best or (trusted and not best[key][0]):
                            best[key] = (bool(trusted), "r", response)
                            sizes[response] = size
                wanted = sorted({holder for _, kind, holder in best.values() if kind == "r"})
                if sum(sizes[key] for key in wanted) > limits.bytes:
                    return None
                bodies: dict[str, Any] = {}
                for chunk in chunks(wanted):
                    bodies.update(conn.execute(
                        f"SELECT id, body FROM stored_responses WHERE id IN ({marks(chunk)})", chunk).fetchall())
            return best, bodies

        chosen = await self.db.run(work)
        if chosen is None:
            return Found(over=True)
        best, bodies = chosen  # decoded outside the lock, and off the loop when large
        size = sum(map(len, bodies.values())) + sum(len(what) for _, kind, what in best.values() if kind == "c")
        return await off_loop(size, found_items, best, bodies)


__all__ = ["SCHEMA", "SqliteResponses"]
