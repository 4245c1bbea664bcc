"""The response store's contract (``app.state``), run against both implementations: SQLite and a
real Redis. Ownership, chains in one read, bounds in rows and bytes on every write, expiry, and
failures as ``StoreUnavailable``."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from app.state import ChainLimits, ResponseStore, StoredResponse, StoreUnavailable
from app.state.redis import RedisStore
from app.state.sqlite import WAL_LIMIT, SqliteStore
from tests.redis_server import RedisServer

ALICE, BOB = "tenant-alice", "tenant-bob"


@pytest.fixture(scope="module")
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer()
    yield server
    server.stop()


def open_kind(kind: str, tmp_path: Path, redis_server: RedisServer | None, *, ttl: float = 3600,
              rows: int = 1000, size: int = 1 << 30) -> Any:
    if kind == "sqlite":
        return SqliteStore(tmp_path / "r.sqlite3", ttl, rows, size)
    assert redis_server is not None
    return RedisStore(redis_server.url, ttl, rows, size, prefix=f"test:{tmp_path.name}:")


@pytest.fixture(params=["sqlite", "redis"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Any]:
    server = request.getfixturevalue("redis_server") if request.param == "redis" else None
    opened = open_kind(request.param, tmp_path, server)
    yield opened
    await opened.close()


def record(key: str, previous: str | None = None, text: str = "x") -> StoredResponse:
    return StoredResponse(key, "", {"id": key, "output": [{"type": "message", "text": text}]},
                          [{"type": "message", "role": "user", "content": text}], previous)


async def test_a_record_belongs_to_its_tenant(store: ResponseStore) -> None:
    await store.put(record("r1", text="secret plans"), ALICE)
    got = await store.get("r1", ALICE)
    assert got is not None and got.response["output"][0]["text"] == "secret plans"
    assert got.input == [{"type": "message", "role": "user", "content": "secret plans"}]
    assert got.owner and ALICE not in got.owner  # a digest, not the tenant id
    assert await store.get("r1", BOB) is None  # exactly as for an id that does not exist
    assert await store.get("nope", ALICE) is None
    assert not await store.delete("r1", BOB)
    assert await store.get("r1", ALICE) is not None
    assert await store.delete("r1", ALICE)
    assert await store.get("r1", ALICE) is None
    assert not await store.delete("r1", ALICE)


async def test_chain_reads_a_conversation_oldest_first(store: ResponseStore) -> None:
    previous = None
    for i in range(5):
        await store.put(record(f"c{i}", previous, text=f"turn {i}"), ALICE)
        previous = f"c{i}"
    chain = await store.chain("c4", ALICE, ChainLimits())
    assert [r.id for r in chain.responses] == ["c0", "c1", "c2", "c3", "c4"]
    assert [r.input[0]["content"] for r in chain.responses] == [f"turn {i}" for i in range(5)]
    assert chain.missing is None and chain.over is None
    assert chain.size == sum(len(record(f"c{i}", f"c{i-1}" if i else None, f"turn {i}").encode()) for i in range(5))
    assert [r.id for r in (await store.chain("c2", ALICE, ChainLimits())).responses] == ["c0", "c1", "c2"]


async def test_chain_stops_where_a_link_is_missing_or_foreign(store: ResponseStore) -> None:
    await store.put(record("a"), ALICE)
    await store.put(record("b", "a"), ALICE)
    await store.put(record("c", "b"), ALICE)
    assert (await store.chain("c", BOB, ChainLimits())).missing == "c"  # another tenant's: as absent
    first = await store.chain("zzz", ALICE, ChainLimits())
    assert first.missing == "zzz" and first.responses == []
    await store.delete("b", ALICE)
    broken = await store.chain("c", ALICE, ChainLimits())
    assert broken.missing == "b" and [r.id for r in broken.responses] == ["c"]
    await store.put(record("b", "a"), BOB)  # the same id in another tenant's hands does not join the chain
    assert (await store.chain("c", ALICE, ChainLimits())).missing == "b"


async def test_chain_limits_in_links_and_bytes(store: ResponseStore) -> None:
    previous = None
    for i in range(10):
        await store.put(record(f"l{i}", previous, text="y" * 1000), ALICE)
        previous = f"l{i}"
    by_links = await store.chain("l9", ALICE, ChainLimits(links=4))
    assert by_links.over == "links" and [r.id for r in by_links.responses] == ["l6", "l7", "l8", "l9"]
    one = len(record("l1", "l0", "y" * 1000).encode())
    by_bytes = await store.chain("l9", ALICE, ChainLimits(bytes=3 * one + 10))
    assert by_bytes.over == "bytes" and [r.id for r in by_bytes.responses] == ["l7", "l8", "l9"]
    assert by_bytes.size <= 3 * one + 10
    assert (await store.chain("l9", ALICE, ChainLimits(links=10))).over is None


async def test_chain_stops_decoding_at_the_item_bound(store: ResponseStore) -> None:
    """Items (input and output) are counted as the chain is decoded, newest first: decoding stops
    before the record that passes the bound, however many bytes the walk allowed."""
    previous = None
    for i in range(6):  # 3 items each: two input messages, one output item
        items = [{"type": "message", "role": "user", "content": f"t{i}"}] * 2
        await store.put(StoredResponse(f"i{i}", "", {"output": [{"type": "message"}]}, items, previous), ALICE)
        previous = f"i{i}"
    within = await store.chain("i5", ALICE, ChainLimits(items=18))
    assert within.over is None and len(within.responses) == 6
    cut = await store.chain("i5", ALICE, ChainLimits(items=10))
    assert cut.over == "items" and [r.id for r in cut.responses] == ["i3", "i4", "i5"]
    assert cut.ids == ["i5", "i4", "i3"] and cut.size == sum(len(r.encode()) for r in cut.responses)


@pytest.mark.parametrize("kind", ["sqlite", "redis"])
async def test_bounds_hold_after_every_write(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    server = request.getfixturevalue("redis_server") if kind == "redis" else None
    by_rows = open_kind(kind, tmp_path / "rows", server, rows=5)
    for i in range(12):
        await by_rows.put(record(f"r{i}"), ALICE)
        rows, _ = await _totals(by_rows)
        assert rows <= 5  # on every write, not every hundredth
    kept = [i for i in range(12) if await by_rows.get(f"r{i}", ALICE) is not None]
    assert kept == list(range(7, 12))
    one = len(record("b0", text="z" * 10_000).encode())
    by_bytes = open_kind(kind, tmp_path / "bytes", server, size=3 * one + 100)
    for i in range(8):
        await by_bytes.put(record(f"b{i}", text="z" * 10_000), ALICE)
        assert (await _totals(by_bytes))[1] <= 3 * one + 100
    assert [i for i in range(8) if await by_bytes.get(f"b{i}", ALICE) is not None] == [5, 6, 7]
    await by_bytes.put(record("b7", text="short"), ALICE)  # a replaced record's bytes are counted once
    rows, size = await _totals(by_bytes)
    assert rows == 3 and size == 2 * one + len(record("b7", text="short").encode())
    await by_rows.close()
    await by_bytes.close()


async def _totals(store: Any) -> tuple[int, int]:
    totals = store.totals()
    return await totals if asyncio.iscoroutine(totals) else totals


@pytest.mark.parametrize("kind", ["sqlite", "redis"])
async def test_records_expire(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    server = request.getfixturevalue("redis_server") if kind == "redis" else None
    store = open_kind(kind, tmp_path, server, ttl=1)
    await store.put(record("e"), ALICE)
    assert await store.get("e", ALICE) is not None
    await asyncio.sleep(1.3 if kind == "sqlite" else 2.2)
    assert await store.get("e", ALICE) is None
    assert (await store.chain("e", ALICE, ChainLimits())).missing == "e"
    await store.close()


async def test_owners_agree_across_connections_to_one_store(redis_server: RedisServer, tmp_path: Path) -> None:
    """Two replicas sharing a Redis compute the same owner digests (the secret lives in Redis)."""
    one = open_kind("redis", tmp_path, redis_server)
    two = open_kind("redis", tmp_path, redis_server)
    await one.put(record("shared"), ALICE)
    assert await two.get("shared", ALICE) is not None
    assert await two.get("shared", BOB) is None
    await one.close()
    await two.close()
    db = SqliteStore(tmp_path / "s.sqlite3", 3600, 100, 1 << 30)
    await db.put(record("kept"), ALICE)
    await db.close()
    reopened = SqliteStore(tmp_path / "s.sqlite3", 3600, 100, 1 << 30)  # and across restarts
    assert await reopened.get("kept", ALICE) is not None
    await reopened.close()


async def test_sqlite_rows_from_before_owners_belong_to_the_single_tenant(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite3"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE responses (id TEXT PRIMARY KEY, record BLOB NOT NULL, created REAL NOT NULL, "
               "expires REAL NOT NULL)")
    body = orjson.dumps({"response": {"id": "old"}, "input": [], "previous_response_id": None})
    db.execute("INSERT INTO responses VALUES ('old', ?, 1, 9e12)", (body,))
    db.commit()
    db.close()
    store = SqliteStore(path, 3600, 100, 1 << 30)
    assert (await store.get("old", "")) is not None
    assert (await store.get("old", ALICE)) is None
    assert store.totals() == (1, len(body))
    await store.close()


async def test_sqlite_write_ahead_log_is_truncated_after_a_burst(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "w.sqlite3", 3600, 20, 1 << 30)
    for i in range(200):
        await store.put(record(f"w{i}", text="q" * 100_000), ALICE)
    wal = tmp_path / "w.sqlite3-wal"
    assert wal.stat().st_size <= WAL_LIMIT + (1 << 20)
    await store.close()


async def test_sqlite_failures_are_store_unavailable(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "f.sqlite3", 3600, 100, 1 << 30)
    await store.put(record("f"), ALICE)
    store._db.close()  # the file handle gone: every use fails as the disk or file failing would
    for attempt in (store.get("f", ALICE), store.put(record("g"), ALICE), store.delete("f", ALICE),
                    store.chain("f", ALICE, ChainLimits())):
        with pytest.raises(StoreUnavailable):
            await attempt
    assert not await store.ping()
    (tmp_path / "bad.sqlite3").write_bytes(b"this is not a database" * 100)
    with pytest.raises(StoreUnavailable, match="cannot be opened"):
        SqliteStore(tmp_path / "bad.sqlite3", 3600, 100, 1 << 30)
    (tmp_path / "file").write_text("x")
    with pytest.raises(StoreUnavailable, match="cannot be opened"):
        SqliteStore(tmp_path / "file" / "under" / "r.sqlite3", 3600, 100, 1 << 30)


async def test_redis_down_is_store_unavailable_and_recovers_by_itself(tmp_path: Path) -> None:
    server = RedisServer()
    store = RedisStore(server.url, 3600, 100, 1 << 30)
    await store.put(record("before"), ALICE)
    assert await store.ping()
    port = server.port
    server.stop()
    for attempt in (store.get("before", ALICE), store.put(record("x"), ALICE), store.delete("before", ALICE),
                    store.chain("before", ALICE, ChainLimits())):
        with pytest.raises(StoreUnavailable):
            await attempt
    assert not await store.ping()
    restarted = RedisServer(port=port)  # the same address, empty (no persistence): pooled connections are stale
    try:
        await store.put(record("after"), ALICE)  # the first command on a stale connection is retried once
        assert await store.get("after", ALICE) is not None
    finally:
        await store.close()
        restarted.stop()
