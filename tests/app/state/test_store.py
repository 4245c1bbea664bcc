"""The response store's contract (``app.state``), run against both implementations: SQLite and a
real Redis. Ownership, chains in one read, conversations and their items, the item index, bounds
in rows and bytes on every write, expiry, and failures as ``StoreUnavailable``."""

from __future__ import annotations

import asyncio
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from app.state import (
    ChainLimits,
    ConversationLimits,
    StoredConversation,
    StoredItem,
    StoredResponse,
    Stores,
    StoreUnavailable,
)
from app.state.redis import open_redis
from app.state.sqlite import WAL_LIMIT, SqliteDatabase, open_sqlite
from tests.redis_server import RedisServer

ALICE, BOB = "tenant-alice", "tenant-bob"


@pytest.fixture(scope="module")
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer()
    yield server
    server.stop()


def open_kind(kind: str, tmp_path: Path, redis_server: RedisServer | None, *, ttl: float = 3600,
              rows: int = 1000, size: int = 1 << 30) -> Stores:
    if kind == "sqlite":
        return open_sqlite(tmp_path / "r.sqlite3", ttl, rows, size)
    assert redis_server is not None
    return open_redis(redis_server.url, ttl, rows, size, prefix=f"test:{tmp_path.name}:")


@pytest.fixture(params=["sqlite", "redis"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Stores]:
    server = request.getfixturevalue("redis_server") if request.param == "redis" else None
    opened = open_kind(request.param, tmp_path, server)
    yield opened
    await opened.close()


def record(key: str, previous: str | None = None, text: str = "x") -> StoredResponse:
    return StoredResponse(key, "", {"id": key, "output": [{"type": "message", "text": text}]},
                          [{"type": "message", "role": "user", "content": text}], previous)


async def test_a_record_belongs_to_its_tenant(store: Stores) -> None:
    await store.responses.put(record("r1", text="secret plans"), ALICE)
    got = await store.responses.get("r1", ALICE)
    assert got is not None and got.response["output"][0]["text"] == "secret plans"
    assert got.input == [{"type": "message", "role": "user", "content": "secret plans"}]
    assert got.owner and ALICE not in got.owner  # a digest, not the tenant id
    assert await store.responses.get("r1", BOB) is None  # exactly as for an id that does not exist
    assert await store.responses.get("nope", ALICE) is None
    assert not await store.responses.delete("r1", BOB)
    assert await store.responses.get("r1", ALICE) is not None
    assert await store.responses.delete("r1", ALICE)
    assert await store.responses.get("r1", ALICE) is None
    assert not await store.responses.delete("r1", ALICE)


async def test_a_record_is_stored_as_its_size_was_counted(store: Stores, monkeypatch: pytest.MonkeyPatch) -> None:
    """A record's parts made to count its size are the ones stored: not made again (the echo of an
    agent's turn alone is ~30 KB); a copy with other fields makes its own."""
    import dataclasses

    encodings: list[Any] = []
    real = orjson.dumps

    def counted(value: Any, *args: Any, **kwargs: Any) -> bytes:
        encodings.append(value)
        return real(value, *args, **kwargs)

    for made in (record("r1", text="once"), echoing("r2")):
        assert made.size() == len(made.encode())  # what --max-stored-response-bytes bounds: the whole record
        encodings.clear()
        monkeypatch.setattr(orjson, "dumps", counted)
        await store.responses.put(made, ALICE)
        assert not [v for v in encodings if isinstance(v, (dict, list)) and v != []]  # nothing encoded again
        monkeypatch.undo()
        got = await store.responses.get(made.id, ALICE)
        assert got is not None and got.response == made.response
        other = dataclasses.replace(made, response={"id": made.id, "output": []})
        assert other.stored is None and b'"output":[]' in other.parts()[0]


async def test_chain_reads_a_conversation_oldest_first(store: Stores) -> None:
    previous = None
    for i in range(5):
        await store.responses.put(record(f"c{i}", previous, text=f"turn {i}"), ALICE)
        previous = f"c{i}"
    chain = await store.responses.chain("c4", ALICE, ChainLimits())
    assert [r.id for r in chain.responses] == ["c0", "c1", "c2", "c3", "c4"]
    assert [r.input[0]["content"] for r in chain.responses] == [f"turn {i}" for i in range(5)]
    assert chain.missing is None and chain.over is None
    assert chain.size == sum(len(record(f"c{i}", f"c{i-1}" if i else None, f"turn {i}").encode()) for i in range(5))
    assert [r.id for r in (await store.responses.chain("c2", ALICE, ChainLimits())).responses] == ["c0", "c1", "c2"]


async def test_chain_stops_where_a_link_is_missing_or_foreign(store: Stores) -> None:
    await store.responses.put(record("a"), ALICE)
    await store.responses.put(record("b", "a"), ALICE)
    await store.responses.put(record("c", "b"), ALICE)
    assert (await store.responses.chain("c", BOB, ChainLimits())).missing == "c"  # another tenant's: as absent
    first = await store.responses.chain("zzz", ALICE, ChainLimits())
    assert first.missing == "zzz" and first.responses == []
    await store.responses.delete("b", ALICE)
    broken = await store.responses.chain("c", ALICE, ChainLimits())
    assert broken.missing == "b" and [r.id for r in broken.responses] == ["c"]
    await store.responses.put(record("b", "a"), BOB)  # the same id in another tenant's hands does not join the chain
    assert (await store.responses.chain("c", ALICE, ChainLimits())).missing == "b"


async def test_chain_limits_in_links_and_bytes(store: Stores) -> None:
    previous = None
    for i in range(10):
        await store.responses.put(record(f"l{i}", previous, text="y" * 1000), ALICE)
        previous = f"l{i}"
    by_links = await store.responses.chain("l9", ALICE, ChainLimits(links=4))
    assert by_links.over == "links" and [r.id for r in by_links.responses] == ["l6", "l7", "l8", "l9"]
    one = len(record("l1", "l0", "y" * 1000).encode())
    by_bytes = await store.responses.chain("l9", ALICE, ChainLimits(bytes=3 * one + 10))
    assert by_bytes.over == "bytes" and [r.id for r in by_bytes.responses] == ["l7", "l8", "l9"]
    assert by_bytes.size <= 3 * one + 10
    assert (await store.responses.chain("l9", ALICE, ChainLimits(links=10))).over is None


async def test_links_walk_the_chain_without_its_bodies(store: Stores) -> None:
    """``links`` walks as ``chain`` does — the same ids, the same missing link, the same limit in
    links and bytes, the same size — and reads no body (``app.prefix`` checks a chain it decoded)."""
    previous = None
    for i in range(6):
        await store.responses.put(record(f"k{i}", previous, text="z" * 500), ALICE)
        previous = f"k{i}"
    one = len(record("k1", "k0", "z" * 500).encode())
    for limits in (ChainLimits(), ChainLimits(links=3), ChainLimits(bytes=2 * one + 5)):
        chain, links = (await store.responses.chain("k5", ALICE, limits), await store.responses.links("k5", ALICE, limits))
        assert (links.ids, links.missing, links.over, links.size) == (chain.ids, chain.missing, chain.over, chain.size)
        assert links.responses == []
    assert (await store.responses.links("k5", BOB, ChainLimits())).missing == "k5"  # another tenant's: as absent
    await store.responses.delete("k2", ALICE)
    broken = await store.responses.links("k5", ALICE, ChainLimits())
    assert broken.missing == "k2" and broken.ids == ["k5", "k4", "k3"]


async def test_removals_count_every_way_a_response_goes(store: Stores) -> None:
    """A chain walked once is still whole while its newest response is there and its owner's count
    of removals has not moved: deleting, replacing or the budget dropping any of the owner's
    responses moves it; another owner's do not. ``links`` reports the count and the earliest expiry."""
    previous = None
    for i in range(4):
        await store.responses.put(record(f"w{i}", previous), ALICE)
        previous = f"w{i}"
    walked = await store.responses.links("w3", ALICE, ChainLimits())
    assert walked.ids == ["w3", "w2", "w1", "w0"] and walked.removals is not None
    assert time.time() + 3000 < walked.expires <= time.time() + 3600  # the first's: stored first
    assert await store.responses.removals("w3", ALICE) == walked.removals
    assert await store.responses.removals("w3", BOB) is None  # another tenant's: not there
    assert await store.responses.removals("nope", ALICE) is None
    await store.responses.put(record("w4", "w3"), ALICE)  # a new response removes nothing
    assert await store.responses.removals("w3", ALICE) == walked.removals
    await store.responses.put(record("b0"), BOB)
    await store.responses.delete("b0", BOB)  # another owner's removal
    assert await store.responses.removals("w3", ALICE) == walked.removals
    await store.responses.delete("w1", ALICE)  # deleted in the middle
    after_delete = await store.responses.removals("w3", ALICE)
    assert after_delete is not None and after_delete > walked.removals
    await store.responses.put(record("w2", "w1", text="again"), ALICE)  # replaced
    after_replace = await store.responses.removals("w3", ALICE)
    assert after_replace is not None and after_replace > after_delete


@pytest.mark.parametrize("kind", ["sqlite", "redis"])
async def test_removals_count_what_the_budget_drops(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    server = request.getfixturevalue("redis_server") if kind == "redis" else None
    store = open_kind(kind, tmp_path, server, rows=3)
    try:
        await store.responses.put(record("v0"), ALICE)
        await store.responses.put(record("v1", "v0"), ALICE)
        walked = await store.responses.links("v1", ALICE, ChainLimits())
        await store.responses.put(record("v2", "v1"), ALICE)
        assert await store.responses.removals("v1", ALICE) == walked.removals  # within the budget
        await store.responses.put(record("v3", "v2"), ALICE)  # past it: v0 is dropped
        assert (await store.responses.links("v3", ALICE, ChainLimits())).missing == "v0"
        dropped = await store.responses.removals("v1", ALICE)
        assert dropped is not None and walked.removals is not None and dropped > walked.removals
    finally:
        await store.close()


async def test_chain_stops_decoding_at_the_item_bound(store: Stores) -> None:
    """Items (input and output) are counted as the chain is decoded, newest first: decoding stops
    before the record that passes the bound, however many bytes the walk allowed."""
    previous = None
    for i in range(6):  # 3 items each: two input messages, one output item
        items = [{"type": "message", "role": "user", "content": f"t{i}"}] * 2
        made = StoredResponse(f"i{i}", "", {"output": [{"type": "message"}]}, items, previous)
        await store.responses.put(made, ALICE)
        previous = f"i{i}"
    within = await store.responses.chain("i5", ALICE, ChainLimits(items=18))
    assert within.over is None and len(within.responses) == 6
    cut = await store.responses.chain("i5", ALICE, ChainLimits(items=10))
    assert cut.over == "items" and [r.id for r in cut.responses] == ["i3", "i4", "i5"]
    assert cut.ids == ["i5", "i4", "i3"] and cut.size == sum(len(r.encode()) for r in cut.responses)


@pytest.mark.parametrize("kind", ["sqlite", "redis"])
async def test_bounds_hold_after_every_write(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    server = request.getfixturevalue("redis_server") if kind == "redis" else None
    by_rows = open_kind(kind, tmp_path / "rows", server, rows=5)
    for i in range(12):
        await by_rows.responses.put(record(f"r{i}"), ALICE)
        rows, _ = await _totals(by_rows)
        assert rows <= 5  # on every write, not every hundredth
    kept = [i for i in range(12) if await by_rows.responses.get(f"r{i}", ALICE) is not None]
    assert kept == list(range(7, 12))
    one = len(record("b0", text="z" * 10_000).encode())
    by_bytes = open_kind(kind, tmp_path / "bytes", server, size=3 * one + 100)
    for i in range(8):
        await by_bytes.responses.put(record(f"b{i}", text="z" * 10_000), ALICE)
        assert (await _totals(by_bytes))[1] <= 3 * one + 100
    assert [i for i in range(8) if await by_bytes.responses.get(f"b{i}", ALICE) is not None] == [5, 6, 7]
    await by_bytes.responses.put(record("b7", text="short"), ALICE)  # a replaced record's bytes are counted once
    rows, size = await _totals(by_bytes)
    assert rows == 3 and size == 2 * one + len(record("b7", text="short").encode())
    await by_rows.close()
    await by_bytes.close()


async def _totals(store: Any) -> tuple[int, int]:
    totals = store.database.totals()
    return await totals if asyncio.iscoroutine(totals) else totals


@pytest.mark.parametrize("kind", ["sqlite", "redis"])
async def test_records_expire(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    server = request.getfixturevalue("redis_server") if kind == "redis" else None
    store = open_kind(kind, tmp_path, server, ttl=1)
    writing = time.monotonic()
    await store.responses.put(record("e"), ALICE)
    await store.responses.put(echoing("echoing"), ALICE)
    found, asked = await store.responses.get("e", ALICE), time.monotonic()
    assert found is not None or asked - writing >= 1  # (on a machine stalled past the ttl: inconclusive)
    await asyncio.sleep(1.3 if kind == "sqlite" else 2.2)
    assert await store.responses.get("e", ALICE) is None
    assert (await store.responses.chain("e", ALICE, ChainLimits())).missing == "e"
    await store.responses.put(record("f"), ALICE)  # (a write drops what has expired)
    assert await _totals(store) == (1, len(record("f").encode())) and await _echo_copies(store) == 0
    await store.close()


async def test_owners_agree_across_connections_to_one_store(redis_server: RedisServer, tmp_path: Path) -> None:
    """Two replicas sharing a Redis compute the same owner digests (the secret lives in Redis)."""
    one = open_kind("redis", tmp_path, redis_server)
    two = open_kind("redis", tmp_path, redis_server)
    await one.responses.put(record("shared"), ALICE)
    assert await two.responses.get("shared", ALICE) is not None
    assert await two.responses.get("shared", BOB) is None
    await one.close()
    await two.close()
    db = open_sqlite(tmp_path / "s.sqlite3", 3600, 100, 1 << 30)
    await db.responses.put(record("kept"), ALICE)
    await db.close()
    reopened = open_sqlite(tmp_path / "s.sqlite3", 3600, 100, 1 << 30)  # and across restarts
    assert await reopened.responses.get("kept", ALICE) is not None
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
    store = open_sqlite(path, 3600, 100, 1 << 30)
    assert (await store.responses.get("old", "")) is not None
    assert (await store.responses.get("old", ALICE)) is None
    assert store.database.totals() == (1, len(body))
    await store.close()


def echoing(key: str, previous: str | None = None, instructions: str = "be brief " * 200,
            tools: list[dict[str, Any]] | None = None) -> StoredResponse:
    """A response that echoes ~5 KB of instructions and tools, as an agent's every turn does."""
    tools = tools if tools is not None else [{"type": "function", "name": f"tool_{k}", "parameters": {
        "type": "object", "properties": {"path": {"type": "string", "description": "d" * 200}}}} for k in range(12)]
    response = {"id": key, "instructions": instructions, "output": [{"type": "message", "text": key}],
                "tools": tools, "status": "completed"}
    return StoredResponse(key, "", response, [{"type": "message", "role": "user", "content": key}], previous)


async def _echo_copies(store: Stores) -> int:
    """How many echoes the store holds apart (``StoredResponse.parts``)."""
    database: Any = store.database
    if isinstance(database, SqliteDatabase):
        with database.lock:
            return int(database.conn.execute("SELECT count(*) FROM response_echoes").fetchone()[0])
    return len(await database.client.keys(database.prefix + "e:*"))


async def test_one_copy_of_what_responses_echo_is_kept(store: Stores) -> None:
    """The instructions and tools every response of an agent echoes are stored once per owner and
    content, counted once in the budget, and given back with each response as it was put; the copy
    goes with the last response that holds it."""
    first, second = echoing("r1"), echoing("r2", "r1")
    await store.responses.put(first, ALICE)
    one = (await _totals(store))[1]
    assert one == len(first.encode()) + 11  # its body and its echo: the record split in two (two nulls, brackets)
    await store.responses.put(second, ALICE)
    two = (await _totals(store))[1]
    assert two - one < len(second.encode()) / 4  # the second stores its own part alone
    for made in (first, second):
        got = await store.responses.get(made.id, ALICE)
        assert got is not None and got.response == made.response and list(got.response) == list(made.response)
        assert got.input == made.input and got.previous_response_id == made.previous_response_id
    chain = await store.responses.chain("r2", ALICE, ChainLimits())
    assert [r.response for r in chain.responses] == [first.response, second.response]
    await store.responses.put(echoing("r3", tools=[]), ALICE)  # other content: a copy of its own
    await store.responses.put(echoing("b1"), BOB)  # another owner: a copy of its own
    assert await _echo_copies(store) == 3
    assert (await store.responses.get("b1", BOB)).response == echoing("b1").response  # type: ignore[union-attr]
    assert await store.responses.delete("r1", ALICE)
    assert (await store.responses.get("r2", ALICE)).response == second.response  # type: ignore[union-attr]
    await store.responses.put(echoing("r2"), ALICE)  # replaced by itself: its echo stays once
    assert await _echo_copies(store) == 3
    for key, tenant in (("r2", ALICE), ("r3", ALICE), ("b1", BOB)):
        assert await store.responses.delete(key, tenant)
    assert await _totals(store) == (0, 0) and await _echo_copies(store) == 0  # nothing echoed is left behind


@pytest.mark.parametrize("kind", ["sqlite", "redis"])
async def test_echoes_leave_with_the_responses_the_budget_drops(kind: str, tmp_path: Path,
                                                                request: pytest.FixtureRequest) -> None:
    """Bounded in bytes with echoes counted: the oldest responses go, and an echo no response holds
    any more goes with them."""
    size = len(echoing("r0").encode())
    server = request.getfixturevalue("redis_server") if kind == "redis" else None
    store = open_kind(kind, tmp_path, server, size=3 * size)
    for k in range(40):  # each with an echo of its own: a full record's bytes each
        await store.responses.put(echoing(f"r{k}", instructions=f"turn {k} " * 300), ALICE)
        assert (await _totals(store))[1] <= 3 * size
    held = (await _totals(store))[0]
    assert 1 <= held <= 3 and await _echo_copies(store) == held
    await store.close()


async def test_responses_stored_whole_by_an_earlier_version_are_read(store: Stores,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A response an earlier toolwire stored with its echo in its body (a replica not yet upgraded,
    a file or a Redis from before) is read, continued and removed as any other."""
    old = echoing("old")
    monkeypatch.setattr(StoredResponse, "parts", lambda self: (self.encode(), None, None))
    await store.responses.put(old, ALICE)
    monkeypatch.undo()
    await store.responses.put(echoing("new", "old"), ALICE)
    assert (await store.responses.get("old", ALICE)).response == old.response  # type: ignore[union-attr]
    chain = await store.responses.chain("new", ALICE, ChainLimits())
    assert [r.response for r in chain.responses] == [old.response, echoing("new", "old").response]
    for key in ("old", "new"):
        assert await store.responses.delete(key, ALICE)
    assert await _totals(store) == (0, 0) and await _echo_copies(store) == 0


async def test_sqlite_responses_stored_before_echoes_were_kept_apart_are_read(tmp_path: Path) -> None:
    """A file whose responses hold their echoes whole (no ``echo`` column) opens, reads them as they
    were, and keeps the echoes of new ones apart."""
    path = tmp_path / "old.sqlite3"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE stored_responses (id TEXT PRIMARY KEY, owner TEXT NOT NULL, previous TEXT, "
               "body BLOB NOT NULL, size INTEGER NOT NULL, created REAL NOT NULL, expires REAL NOT NULL)")
    db.commit()
    db.close()
    store = open_sqlite(path, 3600, 100, 1 << 30)
    old = echoing("old")
    owner = store.database.owner(ALICE)
    with store.database.lock:
        store.database.conn.execute("INSERT INTO stored_responses (id, owner, previous, body, size, created, expires) "
                                    "VALUES ('old', ?, NULL, ?, 1, 1, 9e12)", (owner, old.encode()))
    await store.responses.put(echoing("new", "old"), ALICE)
    assert (await store.responses.get("old", ALICE)).response == old.response  # type: ignore[union-attr]
    chain = await store.responses.chain("new", ALICE, ChainLimits())
    assert [r.response for r in chain.responses] == [old.response, echoing("new", "old").response]
    await store.close()


async def test_sqlite_write_ahead_log_is_truncated_after_a_burst(tmp_path: Path) -> None:
    store = open_sqlite(tmp_path / "w.sqlite3", 3600, 20, 1 << 30)
    for i in range(200):
        await store.responses.put(record(f"w{i}", text="q" * 100_000), ALICE)
    wal = tmp_path / "w.sqlite3-wal"
    assert wal.stat().st_size <= WAL_LIMIT + (1 << 20)
    await store.close()


def test_sqlite_commits_survive_a_killed_process_without_waiting_for_the_disk(tmp_path: Path) -> None:
    path = tmp_path / "k.sqlite3"
    script = (f"import asyncio, os, signal\nfrom app.state.sqlite import open_sqlite\nfrom tests.app.state.test_store import "
              f"ALICE, record\nfrom pathlib import Path\nstore = open_sqlite(Path({str(path)!r}), 3600, 100, 1 << 30)\n"
              f"asyncio.run(store.responses.put(record('k', text='kept'), ALICE))\n"
              f"print(store.database.conn.execute('PRAGMA synchronous').fetchone()[0], flush=True)\n"
              f"os.kill(os.getpid(), signal.SIGKILL)\n")
    done = subprocess.run([sys.executable, "-c", script], check=False, capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parents[3])
    assert done.returncode == -signal.SIGKILL, done.stderr
    assert done.stdout.strip() == "1"  # NORMAL: a commit does not wait for the disk
    store = open_sqlite(path, 3600, 100, 1 << 30)
    kept = asyncio.run(store.responses.get("k", ALICE))
    assert kept is not None and kept.response["id"] == "k"
    asyncio.run(store.close())


async def test_sqlite_reads_never_wait_for_another_process_writing(tmp_path: Path) -> None:
    """Every read is a snapshot of what was committed (write-ahead log): it answers while another
    process — a worker or a replica on the same file — holds the write lock, instead of waiting
    for it (``BEGIN IMMEDIATE`` is for writes). The store's busy timeout is cut to 0.2 s here, so a
    read that waited would fail, as ``StoreUnavailable``, instead of hanging the test."""
    from app.state import Batch, RunLimits

    path = tmp_path / "rw.sqlite3"
    store = open_sqlite(path, 3600, 1000, 1 << 30)
    await store.responses.put(record("first"), ALICE)
    await store.responses.put(StoredResponse("second", "", {"id": "second", "output": []}, [], "first"), ALICE)
    await store.conversations.create(conversation("conv_r"), [message("mr", "kept")], ALICE, ConversationLimits())
    await store.runs.open_run(StoredResponse("run_r", "", {"id": "run_r", "status": "queued"}, []), ALICE,
                              Batch(0, b"event: a\ndata: {}\n\n", 1), RunLimits(1 << 20))
    store.database.conn.execute("PRAGMA busy_timeout = 200")
    writer = sqlite3.connect(str(path), isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")  # another process, in the middle of a write
    writer.execute("UPDATE store_meta SET value = value WHERE name = 'rows'")
    try:
        limits = ChainLimits()
        got = await store.responses.get("second", ALICE)
        assert got is not None and got.previous_response_id == "first"
        assert [r.id for r in (await store.responses.chain("second", ALICE, limits)).responses] == ["first", "second"]
        assert (await store.responses.links("second", ALICE, limits)).ids == ["second", "first"]
        assert await store.responses.removals("second", ALICE) == 0
        assert set((await store.responses.items(["mr"], ALICE, limits)).items) == {"mr"}
        assert (await store.conversations.get("conv_r", ALICE)) is not None
        page = await store.conversations.list_items("conv_r", ALICE, None, 10, False)
        assert page is not None and [item.id for item in page.items] == ["mr"]
        assert (await store.conversations.get_item("conv_r", "mr", ALICE))[1] is not None
        read = await store.conversations.read_items("conv_r", ALICE)
        assert read is not None and [item.id for item in read.items] == ["mr"]
        run = await store.runs.read_run("run_r", ALICE, 0)
        assert run is not None and run.state.status == "queued"
        with pytest.raises(StoreUnavailable):  # a write does wait for the lock, and gives up past the timeout
            await store.responses.put(record("third"), ALICE)
    finally:
        writer.execute("ROLLBACK")
        writer.close()
    await store.responses.put(record("third"), ALICE)  # the lock released: writes go on
    assert await store.responses.get("third", ALICE) is not None
    await store.close()


async def test_sqlite_failures_are_store_unavailable(tmp_path: Path) -> None:
    store = open_sqlite(tmp_path / "f.sqlite3", 3600, 100, 1 << 30)
    await store.responses.put(record("f"), ALICE)
    store.database.conn.close()  # the file handle gone: every use fails as the disk or file failing would
    kept = store.responses
    for attempt in (kept.get("f", ALICE), kept.put(record("g"), ALICE), kept.delete("f", ALICE),
                    store.responses.chain("f", ALICE, ChainLimits()), *_conversation_calls(store)):
        with pytest.raises(StoreUnavailable):
            await attempt
    assert not await store.database.ping()
    (tmp_path / "bad.sqlite3").write_bytes(b"this is not a database" * 100)
    with pytest.raises(StoreUnavailable, match="cannot be opened"):
        open_sqlite(tmp_path / "bad.sqlite3", 3600, 100, 1 << 30)
    (tmp_path / "file").write_text("x")
    with pytest.raises(StoreUnavailable, match="cannot be opened"):
        open_sqlite(tmp_path / "file" / "under" / "r.sqlite3", 3600, 100, 1 << 30)


async def test_redis_down_is_store_unavailable_and_recovers_by_itself(tmp_path: Path) -> None:
    server = RedisServer()
    store = open_redis(server.url, 3600, 100, 1 << 30)
    await store.responses.put(record("before"), ALICE)
    assert await store.database.ping()
    port = server.port
    server.stop()
    kept = store.responses
    for attempt in (kept.get("before", ALICE), kept.put(record("x"), ALICE), kept.delete("before", ALICE),
                    store.responses.chain("before", ALICE, ChainLimits()), *_conversation_calls(store)):
        with pytest.raises(StoreUnavailable):
            await attempt
    assert not await store.database.ping()
    restarted = RedisServer(port=port)  # the same address, empty (no persistence): pooled connections are stale
    try:
        await store.responses.put(record("after"), ALICE)  # the first command on a stale connection is retried once
        assert await store.responses.get("after", ALICE) is not None
    finally:
        await store.close()
        restarted.stop()


# ------------------------------------------------------------------------------- conversations


def message(key: str, text: str = "x", role: str = "user", trusted: bool = False) -> StoredItem:
    return StoredItem({"id": key, "type": "message", "role": role, "content": [{"type": "input_text", "text": text}]},
                      trusted)


def conversation(key: str, **metadata: str) -> StoredConversation:
    return StoredConversation(key, 1_700_000_000, metadata)


def _conversation_calls(store: Any) -> list[Any]:
    """One call of every conversation operation (each must fail as ``StoreUnavailable``)."""
    return [store.conversations.create(conversation("cf"), [message("m")], ALICE, ConversationLimits()),
            store.conversations.get("cf", ALICE), store.conversations.update("cf", ALICE, {}, ConversationLimits()),
            store.conversations.delete("cf", ALICE),
            store.conversations.add_items("cf", [message("n")], ALICE, ConversationLimits()),
            store.conversations.list_items("cf", ALICE, None, 20, True), store.conversations.get_item("cf", "m", ALICE),
            store.conversations.delete_item("cf", "m", ALICE), store.conversations.read_items("cf", ALICE),
            store.responses.items(["m"], ALICE, ChainLimits())]


async def test_a_conversation_belongs_to_its_tenant(store: Stores) -> None:
    made = await store.conversations.create(conversation("conv_a", topic="plans"), [message("m1", "secret plans")],
                                           ALICE, ConversationLimits())
    assert made.added == ["m1"] and made.conversation is not None and made.conversation.items == 1
    got = await store.conversations.get("conv_a", ALICE)
    assert got is not None and got.metadata == {"topic": "plans"} and got.created_at == 1_700_000_000
    limits = ConversationLimits()
    # another tenant: every operation reads the conversation as absent, and changes nothing
    assert await store.conversations.get("conv_a", BOB) is None
    assert await store.conversations.list_items("conv_a", BOB, None, 20, False) is None
    assert await store.conversations.get_item("conv_a", "m1", BOB) == (None, None)
    assert await store.conversations.delete_item("conv_a", "m1", BOB) == (None, False)
    assert (await store.conversations.add_items("conv_a", [message("m2")], BOB, limits)).conversation is None
    assert (await store.conversations.update("conv_a", BOB, {"x": "y"}, limits)).conversation is None
    assert await store.conversations.read_items("conv_a", BOB) is None
    assert not await store.conversations.delete("conv_a", BOB)
    assert (await store.responses.items(["m1"], BOB, ChainLimits())).items == {}
    read = await store.conversations.read_items("conv_a", ALICE)
    assert read is not None and read.items == [message("m1", "secret plans")] and read.whole
    assert (await store.conversations.get("conv_a", ALICE)) == got  # untouched
    assert await store.conversations.delete("conv_a", ALICE)
    assert await store.conversations.get("conv_a", ALICE) is None
    assert await store.conversations.read_items("conv_a", ALICE) is None
    assert not await store.conversations.delete("conv_a", ALICE)


async def test_conversation_items_keep_their_order_and_page(store: Stores) -> None:
    limits = ConversationLimits()
    await store.conversations.create(conversation("conv_p"), [message(f"m{i}") for i in range(3)], ALICE, limits)
    more = [message(f"m{i}", trusted=i == 5) for i in range(3, 7)]
    added = await store.conversations.add_items("conv_p", more, ALICE, limits)
    assert added.added == ["m3", "m4", "m5", "m6"] and added.conversation is not None
    assert added.conversation.items == 7
    read = await store.conversations.read_items("conv_p", ALICE)
    assert read is not None
    everything = read.items
    assert [i.id for i in everything] == [f"m{i}" for i in range(7)]
    assert [i.trusted for i in everything] == [i == 5 for i in range(7)]  # who wrote each item is kept

    async def ids(after: str | None, limit: int, descending: bool) -> tuple[list[str], bool]:
        page = await store.conversations.list_items("conv_p", ALICE, after, limit, descending)
        assert page is not None
        return [i.id for i in page.items], page.has_more

    assert await ids(None, 3, False) == (["m0", "m1", "m2"], True)
    assert await ids("m2", 3, False) == (["m3", "m4", "m5"], True)
    assert await ids("m5", 3, False) == (["m6"], False)
    assert await ids(None, 3, True) == (["m6", "m5", "m4"], True)
    assert await ids("m1", 3, True) == (["m0"], False)
    assert await ids(None, 7, True) == ([f"m{i}" for i in range(6, -1, -1)], False)
    assert await ids("not-there", 3, False) == ([], False)
    found, item = await store.conversations.get_item("conv_p", "m4", ALICE)
    assert found is not None and found.items == 7 and item == message("m4")
    assert (await store.conversations.get_item("conv_p", "nope", ALICE))[1] is None
    before = await store.conversations.get("conv_p", ALICE)
    assert before is not None
    after, deleted = await store.conversations.delete_item("conv_p", "m4", ALICE)
    assert deleted and after is not None and after.items == 6
    assert after.size == before.size - len(message("m4").encode())
    assert await store.conversations.delete_item("conv_p", "m4", ALICE) == (after, False)
    assert await ids("m3", 2, False) == (["m5", "m6"], False)
    updated = await store.conversations.update("conv_p", ALICE, {"k": "v"}, limits)
    assert updated.conversation is not None and updated.conversation.metadata == {"k": "v"}
    assert updated.conversation.created_at == 1_700_000_000  # kept
    assert updated.conversation.size == after.size + len(b'{"k":"v"}') - len(b"{}")


async def test_conversation_items_read_from_a_mark(store: Stores) -> None:
    """A read from the mark an earlier read left gets only the items added since — and all of them
    once an item was deleted in between, or from another tenant's or conversation's mark."""
    limits = ConversationLimits()
    await store.conversations.create(conversation("conv_m"), [message(f"m{i}") for i in range(3)], ALICE, limits)
    first = await store.conversations.read_items("conv_m", ALICE)
    assert first is not None and first.whole and [i.id for i in first.items] == ["m0", "m1", "m2"]
    same = await store.conversations.read_items("conv_m", ALICE, first.mark)
    assert same is not None and not same.whole and same.items == [] and same.mark == first.mark
    await store.conversations.add_items("conv_m", [message("m3"), message("m4", trusted=True)], ALICE, limits)
    grown = await store.conversations.read_items("conv_m", ALICE, first.mark)
    assert grown is not None and not grown.whole and [i.id for i in grown.items] == ["m3", "m4"]
    assert [i.trusted for i in grown.items] == [False, True] and grown.conversation.items == 5
    assert await store.conversations.read_items("conv_m", BOB, grown.mark) is None
    # an item deleted (even with others added after it): everything is read again
    await store.conversations.delete_item("conv_m", "m1", ALICE)
    await store.conversations.add_items("conv_m", [message("m5")], ALICE, limits)
    again = await store.conversations.read_items("conv_m", ALICE, grown.mark)
    assert again is not None and again.whole and [i.id for i in again.items] == ["m0", "m2", "m3", "m4", "m5"]
    later = await store.conversations.read_items("conv_m", ALICE, again.mark)
    assert later is not None and not later.whole and later.items == []
    # a mark from ahead of the conversation (another one's): everything
    ahead = await store.conversations.read_items("conv_m", ALICE, type(again.mark)(again.mark.next + 5, 99))
    assert ahead is not None and ahead.whole and len(ahead.items) == 5


async def test_conversation_writes_past_a_limit_are_refused_whole(store: Stores) -> None:
    one = len(message("m0", "y" * 100).encode())
    meta = len(conversation("conv_l").encode_meta())
    limits = ConversationLimits(items=4, bytes=meta + 3 * one)
    refused = await store.conversations.create(conversation("conv_l"), [message(f"m{i}", "y" * 100) for i in range(5)],
                                              ALICE, limits)
    assert refused.over == "items" and refused.added == []
    assert await store.conversations.get("conv_l", ALICE) is None  # nothing was made
    made = await store.conversations.create(conversation("conv_l"), [message("m0", "y" * 100)], ALICE, limits)
    assert made.conversation is not None and made.conversation.size == meta + one
    over = await store.conversations.add_items("conv_l", [message(f"n{i}", "y" * 100) for i in range(3)], ALICE, limits)
    assert over.over == "bytes" and over.added == [] and over.conversation == made.conversation
    twice = [message("n0", "y" * 100)] * 2
    assert (await store.conversations.add_items("conv_l", twice, ALICE, limits)).duplicate == "n0"
    assert (await store.conversations.add_items("conv_l", [message("m0")], ALICE, limits)).duplicate == "m0"
    current = await store.conversations.read_items("conv_l", ALICE)
    assert current is not None and [i.id for i in current.items] == ["m0"]  # every refused write changed nothing
    skipped = await store.conversations.add_items("conv_l", [message("m0"), message("n1", "y" * 100)], ALICE, limits,
                                    skip_existing=True)
    assert skipped.added == ["n1"]
    tight = ConversationLimits(items=4, bytes=meta + 2 * one + 5)
    assert (await store.conversations.update("conv_l", ALICE, {"long": "z" * 50}, tight)).over == "bytes"
    got = await store.conversations.get("conv_l", ALICE)
    assert got is not None and got.metadata == {} and got.items == 2 and got.size == meta + 2 * one


@pytest.mark.parametrize("kind", ["sqlite", "redis"])
async def test_conversations_count_in_the_store_bounds(kind: str, tmp_path: Path,
                                                       request: pytest.FixtureRequest) -> None:
    server = request.getfixturevalue("redis_server") if kind == "redis" else None
    store = open_kind(kind, tmp_path, server, rows=3)
    limits = ConversationLimits()
    await store.conversations.create(conversation("conv_old"), [message("o1")], ALICE, limits)
    await store.responses.put(record("r1"), ALICE)
    await store.responses.put(record("r2"), ALICE)
    await store.conversations.add_items("conv_old", [message("o2")], ALICE, limits)  # a write: now the newest
    await store.responses.put(record("r3"), ALICE)  # four rows: the oldest (r1) goes, not the conversation since
    assert await store.responses.get("r1", ALICE) is None
    assert await store.conversations.get("conv_old", ALICE) is not None
    rows, size = await _totals(store)
    meta = len(conversation("conv_old").encode_meta())
    items = len(message("o1").encode()) + len(message("o2").encode())
    assert rows == 3 and size == meta + items + len(record("r2").encode()) + len(record("r3").encode())
    await store.conversations.create(conversation("conv_new"), [], ALICE, limits)
    assert await store.responses.get("r2", ALICE) is None  # the oldest went again
    assert await store.conversations.delete("conv_old", ALICE)
    assert await _totals(store) == (2, len(record("r3").encode()) + len(conversation("conv_new").encode_meta()))
    await store.close()
    by_bytes = open_kind(kind, tmp_path / "bytes", server, size=5000)
    await by_bytes.conversations.create(conversation("conv_b"), [], ALICE, limits)
    big = [message(f"b{i}", "z" * 1000) for i in range(6)]
    added = await by_bytes.conversations.add_items("conv_b", big, ALICE, limits)
    assert added.over == "bytes"  # never more than the store holds
    assert (await _totals(by_bytes))[1] <= 5000
    await by_bytes.close()


async def test_the_item_index_finds_a_tenants_items(store: Stores) -> None:
    thought = {"id": "rs_1", "type": "reasoning", "content": [{"type": "reasoning_text", "text": "mine"}]}
    stored = StoredResponse("resp_1", "", {"id": "resp_1", "output": [thought]},
                            [{"id": "msg_in", "type": "message", "role": "user", "content": "hi"}])
    await store.responses.put(stored, ALICE)
    found = await store.responses.items(["rs_1", "msg_in", "nope", "rs_1"], ALICE, ChainLimits())
    assert not found.over
    assert found.items == {"rs_1": StoredItem(thought, True), "msg_in": StoredItem(stored.input[0], False)}
    assert (await store.responses.items(["rs_1", "msg_in"], BOB, ChainLimits())).items == {}  # another tenant's
    # a client-written copy under the same id never hides toolwire's own
    forged = StoredItem({"id": "rs_1", "type": "reasoning", "content": [{"type": "reasoning_text", "text": "forged"}]})
    await store.conversations.create(conversation("conv_i"), [forged, message("c1")], ALICE, ConversationLimits())
    found = await store.responses.items(["rs_1", "c1"], ALICE, ChainLimits())
    assert found.items == {"rs_1": StoredItem(thought, True), "c1": message("c1")}
    assert (await store.responses.items(["rs_1"], ALICE, ChainLimits(bytes=10))).over  # resp_1 would pass the limit
    assert await store.responses.delete("resp_1", ALICE)
    assert (await store.responses.items(["rs_1", "msg_in"], ALICE, ChainLimits())).items == {"rs_1": forged}
    await store.conversations.delete_item("conv_i", "rs_1", ALICE)
    assert (await store.responses.items(["rs_1", "c1"], ALICE, ChainLimits())).items == {"c1": message("c1")}
    await store.conversations.delete("conv_i", ALICE)
    assert (await store.responses.items(["c1"], ALICE, ChainLimits())).items == {}
    assert await _index_size(store) == 0  # every entry went with what it pointed to


async def test_ids_the_index_cannot_keep_are_left_out(store: Stores) -> None:
    odd = [{"id": "a\nb", "type": "message"}, {"id": "l" * 257, "type": "message"}, {"id": "fine", "type": "message"}]
    await store.responses.put(StoredResponse("r_odd", "", {"output": odd}), ALICE)
    found = await store.responses.items(["a\nb", "l" * 257, "fine"], ALICE, ChainLimits())
    assert list(found.items) == ["fine"]
    assert (await store.responses.get("r_odd", ALICE)) is not None  # the response itself is whole


@pytest.mark.parametrize("kind", ["sqlite", "redis"])
async def test_evicted_records_leave_no_index_behind(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    server = request.getfixturevalue("redis_server") if kind == "redis" else None
    store = open_kind(kind, tmp_path, server, rows=2)
    for i in range(6):
        await store.responses.put(StoredResponse(f"r{i}", "", {"output": [{"id": f"o{i}", "type": "message"}]},
                                                 [{"id": f"i{i}", "type": "message"}]), ALICE)
        await store.conversations.create(conversation(f"c{i}"), [message(f"ci{i}")], ALICE, ConversationLimits())
    assert (await store.responses.items(["o5", "ci5", "o0", "ci0"], ALICE, ChainLimits())).items.keys() == {"o5", "ci5"}
    assert await _index_size(store) == 3  # o5, i5 (r5) and ci5 (c5): the rest went with their records
    await store.close()


async def _index_size(store: Any) -> int:
    """Entries of the item index (for responses; a conversation's items are their own index in SQLite)."""
    if isinstance(store.database, SqliteDatabase):
        with store.database.lock:
            return int(store.database.conn.execute("SELECT (SELECT COUNT(*) FROM response_items) + "
                                         "(SELECT COUNT(*) FROM conversation_items)").fetchone()[0])
    total = 0
    async for key in store.database.client.scan_iter(store.database.prefix + "i:*"):
        total += await store.database.client.hlen(key)
    return int(total)


@pytest.mark.parametrize("kind", ["sqlite", "redis"])
async def test_conversations_expire_after_their_last_write(kind: str, tmp_path: Path,
                                                           request: pytest.FixtureRequest) -> None:
    server = request.getfixturevalue("redis_server") if kind == "redis" else None
    store = open_kind(kind, tmp_path, server, ttl=2)
    await store.conversations.create(conversation("conv_e"), [message("e1")], ALICE, ConversationLimits())
    await asyncio.sleep(1.2)
    renewing = time.monotonic()
    await store.conversations.add_items("conv_e", [message("e2")], ALICE, ConversationLimits())  # renews it
    await asyncio.sleep(1.2)  # past the first write's time to live
    found, asked = await store.conversations.get("conv_e", ALICE), time.monotonic()
    assert found is not None or asked - renewing >= 2  # (on a machine stalled past the ttl: inconclusive)
    await asyncio.sleep(1.3 if kind == "sqlite" else 2.2)
    assert await store.conversations.get("conv_e", ALICE) is None
    assert (await store.responses.items(["e1"], ALICE, ChainLimits())).items == {}
    await store.close()


async def test_sqlite_stored_responses_from_before_the_index_are_indexed(tmp_path: Path) -> None:
    path = tmp_path / "pre.sqlite3"
    store = open_sqlite(path, 3600, 100, 1 << 30)
    await store.responses.put(StoredResponse("old", "", {"output": [{"id": "rs_old", "type": "reasoning"}]}), ALICE)
    with store.database.lock:
        store.database.conn.execute("DROP TABLE response_items")
    await store.close()
    reopened = open_sqlite(path, 3600, 100, 1 << 30)
    assert (await reopened.responses.items(["rs_old"], ALICE, ChainLimits())).items["rs_old"].trusted
    await reopened.close()


async def test_large_bodies_are_decoded_off_the_event_loop(store: Stores,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A chain and an item lookup that read more than ``DECODE_INLINE`` bytes decode them in a worker
    thread (never on the loop); small ones stay inline."""
    import threading

    import app.state.base
    import app.state.redis.responses
    import app.state.sqlite.responses

    loop_thread = threading.get_ident()
    threads: list[tuple[str, bool]] = []

    def watched(name: str, work: Any) -> Any:
        def run(*args: Any) -> Any:
            threads.append((name, threading.get_ident() == loop_thread))
            return work(*args)
        return run

    for module in (app.state.sqlite.responses, app.state.redis.responses):
        monkeypatch.setattr(module, "found_items", watched("items", module.found_items))
        monkeypatch.setattr(module, "decode_chain", watched("chain", module.decode_chain))
    big = "w" * (app.state.base.DECODE_INLINE + 1000)
    thought = {"id": "rs_big", "type": "reasoning", "content": [{"type": "reasoning_text", "text": big}]}
    await store.responses.put(StoredResponse("resp_big", "", {"id": "resp_big", "output": [thought]}, []), ALICE)
    await store.responses.put(record("resp_small", text="small"), ALICE)
    assert (await store.responses.items(["rs_big"], ALICE, ChainLimits())).items["rs_big"].item == thought
    assert [r.id for r in (await store.responses.chain("resp_big", ALICE, ChainLimits())).responses] == ["resp_big"]
    await store.responses.chain("resp_small", ALICE, ChainLimits())
    assert threads == [("items", False), ("chain", False), ("chain", True)]
