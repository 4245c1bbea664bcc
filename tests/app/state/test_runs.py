"""The runs of background responses in the store (``app.state.runs``), against both implementations:
SQLite and a real Redis. A run and its log belong to the response's tenant; batches are logged once,
where the log ends; a run that ended takes no more events; settling is one step (events, status,
stored response) and is decided on what the store holds at that moment — a cancel from elsewhere, a
stale heartbeat, a deleted response; logs are bounded per run, and runs by count and bytes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from app.state import Batch, RunLimits, StoredResponse, Stores, StoreUnavailable
from app.state.redis import open_redis
from app.state.sqlite import SqliteDatabase, open_sqlite
from tests.app.state.test_store import ALICE, BOB, open_kind, redis_server  # noqa: F401  (a fixture)
from tests.redis_server import RedisServer

LIMITS = RunLimits(events=1 << 20)


@pytest.fixture(params=["sqlite", "redis"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Stores]:
    server = request.getfixturevalue("redis_server") if request.param == "redis" else None
    opened = open_kind(request.param, tmp_path, server)
    yield opened
    await opened.close()


def response(key: str, status: str, text: str = "") -> StoredResponse:
    output = [{"type": "message", "content": [{"type": "output_text", "text": text}]}] if text else []
    return StoredResponse(key, "", {"id": key, "status": status, "background": True, "output": output},
                          [{"type": "message", "role": "user", "content": "hi"}])


def frames(first: int, *names: str) -> Batch:
    """``names`` as SSE frames numbered from ``first``."""
    data = b"".join(f'event: {name}\ndata: {{"type":"{name}","sequence_number":{first + k}}}\n\n'.encode()
                    for k, name in enumerate(names))
    return Batch(first, data, len(names))


async def test_a_run_opens_with_its_response_and_belongs_to_its_tenant(store: Stores) -> None:
    head = frames(0, "response.created", "response.queued")
    await store.runs.open_run(response("b1", "queued"), ALICE, head, LIMITS)
    read = await store.runs.read_run("b1", ALICE, 0)
    assert read is not None and read.batches == [head.data]
    state = read.state
    assert (state.status, state.seq, state.logged, state.size, state.batches) == ("queued", 2, 2, len(head.data), 1)
    assert not state.ended and not state.over and 0 <= state.age < 5
    stored = await store.responses.get("b1", ALICE)
    assert stored is not None and stored.response["status"] == "queued"
    assert await store.runs.read_run("b1", BOB, 0) is None  # exactly as for a run that does not exist
    assert await store.runs.append_run("b1", BOB, frames(2, "x"), "in_progress", LIMITS) is None
    assert await store.runs.settle_run("b1", BOB, frames(2, "x"), response("b1", "completed"), LIMITS) is None
    assert await store.runs.read_run("nope", ALICE, None) is None
    assert (await store.runs.read_run("b1", ALICE, 0)).state.seq == 2  # type: ignore[union-attr]


async def test_batches_are_logged_once_where_the_log_ends(store: Stores) -> None:
    await store.runs.open_run(response("b2", "queued"), ALICE, frames(0, "a", "b"), LIMITS)
    one = frames(2, "c", "d", "e")
    state = await store.runs.append_run("b2", ALICE, one, "in_progress", LIMITS)
    assert state is not None and (state.status, state.seq, state.logged, state.batches) == ("in_progress", 5, 5, 2)
    again = await store.runs.append_run("b2", ALICE, one, "in_progress", LIMITS)  # retried: its answer was lost
    assert again is not None and again.seq == 5 and again.batches == 2  # not logged twice: the writer sees seq
    late = await store.runs.append_run("b2", ALICE, frames(9, "z"), "in_progress", LIMITS)
    assert late is not None and late.seq == 5
    beat = await store.runs.append_run("b2", ALICE, Batch(5), "in_progress", LIMITS)  # a heartbeat: no events
    assert beat is not None and beat.seq == 5 and beat.batches == 2
    read = await store.runs.read_run("b2", ALICE, 1)
    assert read is not None and read.batches == [one.data]
    assert (await store.runs.read_run("b2", ALICE, None)).batches == []  # type: ignore[union-attr]
    assert (await store.runs.read_run("b2", ALICE, 7)).batches == []  # type: ignore[union-attr]


async def test_the_heartbeat_ages_by_the_stores_clock(store: Stores) -> None:
    await store.runs.open_run(response("b3", "queued"), ALICE, frames(0, "a"), LIMITS)
    await asyncio.sleep(0.4)
    old = (await store.runs.read_run("b3", ALICE, None)).state  # type: ignore[union-attr]
    assert old.age >= 0.35
    await store.runs.append_run("b3", ALICE, Batch(1), "in_progress", LIMITS)
    assert (await store.runs.read_run("b3", ALICE, None)).state.age < old.age  # type: ignore[union-attr]


async def test_settling_ends_a_run_once_with_its_events_and_response(store: Stores) -> None:
    await store.runs.open_run(response("b4", "queued"), ALICE, frames(0, "a"), LIMITS)
    last = frames(1, "response.output_text.delta", "response.completed")
    misplaced = await store.runs.settle_run("b4", ALICE, frames(7, "x"), response("b4", "completed"), LIMITS)
    assert misplaced is not None and misplaced.seq == 1
    state = await store.runs.settle_run("b4", ALICE, last, response("b4", "completed", "done"), LIMITS)
    assert state is not None and state.status == "completed" and state.ended and state.seq == 3
    stored = await store.responses.get("b4", ALICE)
    assert stored is not None and stored.response["status"] == "completed"
    assert stored.response["output"][0]["content"][0]["text"] == "done"
    # an ended run takes nothing more: not events, not another ending
    late = await store.runs.append_run("b4", ALICE, frames(3, "late"), "in_progress", LIMITS)
    assert late is not None and late.seq == 3
    failed = await store.runs.settle_run("b4", ALICE, frames(3, "error"), response("b4", "failed"), LIMITS, stale=0.0)
    assert failed is not None and failed.status == "completed"
    assert (await store.responses.get("b4", ALICE)).response["status"] == "completed"  # type: ignore[union-attr]
    read = await store.runs.read_run("b4", ALICE, 0)
    assert read is not None and b"".join(read.batches) == frames(0, "a").data + last.data
    with pytest.raises(ValueError):
        await store.runs.settle_run("b4", ALICE, Batch(3), response("b4", "in_progress"), LIMITS)


async def test_a_cancel_from_elsewhere_wins_and_keeps_the_generators_output(store: Stores) -> None:
    await store.runs.open_run(response("b5", "queued"), ALICE, frames(0, "a"), LIMITS)
    await store.runs.append_run("b5", ALICE, frames(1, "b"), "in_progress", LIMITS)
    # another replica cancels: its last event where the log ends, the response stored as cancelled
    cancelled = await store.runs.settle_run("b5", ALICE, frames(2, "error"), response("b5", "cancelled"), LIMITS)
    assert cancelled is not None and cancelled.status == "cancelled" and cancelled.seq == 3
    # the generating replica learns it at its next write, which is refused …
    refused = await store.runs.append_run("b5", ALICE, frames(2, "c"), "in_progress", LIMITS)
    assert refused is not None and refused.status == "cancelled" and refused.seq == 3
    # … and its ending keeps the cancel, with the output it had
    runs = store.runs
    state = await runs.settle_run("b5", ALICE, frames(2, "response.completed"), response("b5", "completed", "all"),
                                  LIMITS, if_cancelled=response("b5", "cancelled", "partial"))
    assert state is not None and state.status == "cancelled"
    stored = await store.responses.get("b5", ALICE)
    assert stored is not None and stored.response["status"] == "cancelled"
    assert stored.response["output"][0]["content"][0]["text"] == "partial"
    read = await store.runs.read_run("b5", ALICE, 0)
    assert read is not None and b"".join(read.batches) == frames(0, "a").data + frames(1, "b").data + \
        frames(2, "error").data
    # a response deleted meanwhile is not brought back by the generator's ending
    await store.runs.open_run(response("b6", "queued"), ALICE, frames(0, "a"), LIMITS)
    await store.runs.settle_run("b6", ALICE, frames(1, "error"), response("b6", "cancelled"), LIMITS)
    assert await store.responses.delete("b6", ALICE)
    await store.runs.settle_run("b6", ALICE, Batch(2), response("b6", "completed"), LIMITS,
                                if_cancelled=response("b6", "cancelled", "partial"))
    assert await store.responses.get("b6", ALICE) is None


async def test_only_a_stale_run_is_declared_failed(store: Stores) -> None:
    await store.runs.open_run(response("b7", "queued"), ALICE, frames(0, "a"), LIMITS)
    fresh = await store.runs.settle_run("b7", ALICE, frames(1, "error", "response.failed"), response("b7", "failed"),
                                        LIMITS, stale=30.0)
    assert fresh is not None and fresh.status == "queued"  # its replica wrote just now: alive
    assert (await store.responses.get("b7", ALICE)).response["status"] == "queued"  # type: ignore[union-attr]
    await asyncio.sleep(0.3)
    dead = await store.runs.settle_run("b7", ALICE, frames(1, "error", "response.failed"), response("b7", "failed"),
                                       LIMITS, stale=0.25)
    assert dead is not None and dead.status == "failed" and dead.seq == 3
    assert (await store.responses.get("b7", ALICE)).response["status"] == "failed"  # type: ignore[union-attr]
    # the replica was alive after all: its writes are refused, so it stops
    late = await store.runs.append_run("b7", ALICE, frames(1, "b"), "in_progress", LIMITS)
    assert late is not None and late.status == "failed"


async def test_a_log_is_bounded_per_run_and_keeps_counting(store: Stores) -> None:
    limits = RunLimits(events=1000)
    big = Batch(0, b"event: x\ndata: {}\n\n" * 40, 40)  # 760 bytes
    await store.runs.open_run(response("b8", "queued"), ALICE, big, limits)
    state = await store.runs.append_run("b8", ALICE, Batch(40, big.data, 40), "in_progress", limits)
    assert state is not None and state.over and state.logged == 40 and state.seq == 80 and state.size == 760
    state = await store.runs.append_run("b8", ALICE, Batch(80, b"event: y\ndata: {}\n\n", 1), "in_progress", limits)
    assert state is not None and state.over and state.logged == 40 and state.seq == 81  # the log stays a prefix
    assert (await store.runs.read_run("b8", ALICE, 0)).batches == [big.data]  # type: ignore[union-attr]


@pytest.mark.parametrize("kind", ["sqlite", "redis"])
async def test_runs_are_bounded_in_count_and_bytes(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    server = request.getfixturevalue("redis_server") if kind == "redis" else None
    by_rows = open_kind(kind, tmp_path / "rows", server, rows=3)
    for i in range(6):
        await by_rows.runs.open_run(response(f"r{i}", "queued"), ALICE, frames(0, "a"), LIMITS)
        assert (await _run_totals(by_rows))[0] <= 3
    assert [i for i in range(6) if await by_rows.runs.read_run(f"r{i}", ALICE, None) is not None] == [3, 4, 5]
    await by_rows.close()
    block = b"event: x\ndata: " + b"z" * 2000 + b"\n\n"
    by_bytes = open_kind(kind, tmp_path / "bytes", server, size=5 * len(block) + 10)
    for i in range(4):
        await by_bytes.runs.open_run(response(f"s{i}", "queued"), ALICE, Batch(0, block, 1), LIMITS)
    await by_bytes.runs.append_run("s0", ALICE, Batch(1, block, 1), "in_progress", LIMITS)  # s0 written last
    await by_bytes.runs.append_run("s0", ALICE, Batch(2, block, 1), "in_progress", LIMITS)  # 6 blocks: one run goes
    assert (await _run_totals(by_bytes))[1] <= 5 * len(block) + 10
    kept = [i for i in range(4) if await by_bytes.runs.read_run(f"s{i}", ALICE, None) is not None]
    assert kept == [0, 2, 3]  # the least recently written went first, never the one being written
    await by_bytes.close()


async def _run_totals(store: Any) -> tuple[int, int]:
    if isinstance(store.database, SqliteDatabase):
        return store.runs.totals()
    rows = await store.database.client.zcard(store.database.prefix + "runs")
    size = await store.database.client.get(store.database.prefix + "runbytes")
    return int(rows), int(size or 0)


async def test_replicas_on_one_redis_share_runs(redis_server: RedisServer, tmp_path: Path) -> None:  # noqa: F811
    one, two = (open_kind("redis", tmp_path, redis_server) for _ in range(2))
    await one.runs.open_run(response("shared", "queued"), ALICE, frames(0, "a"), LIMITS)
    await one.runs.append_run("shared", ALICE, frames(1, "b"), "in_progress", LIMITS)
    read = await two.runs.read_run("shared", ALICE, 0)
    assert read is not None and read.state.status == "in_progress" and len(read.batches) == 2
    await two.runs.settle_run("shared", ALICE, frames(2, "error"), response("shared", "cancelled"), LIMITS)
    assert (await one.runs.append_run("shared", ALICE, frames(2, "c"), "in_progress", LIMITS)).status == "cancelled"
    await one.close()
    await two.close()


async def test_run_failures_are_store_unavailable(tmp_path: Path) -> None:
    db = open_sqlite(tmp_path / "f.sqlite3", 3600, 100, 1 << 30)
    await db.runs.open_run(response("f", "queued"), ALICE, frames(0, "a"), LIMITS)
    db.database.conn.close()
    server = RedisServer()
    rs = open_redis(server.url, 3600, 100, 1 << 30)
    await rs.runs.open_run(response("f", "queued"), ALICE, frames(0, "a"), LIMITS)
    server.stop()
    try:
        for store in (db, rs):
            for attempt in (store.runs.open_run(response("g", "queued"), ALICE, frames(0, "a"), LIMITS),
                            store.runs.append_run("f", ALICE, frames(1, "b"), "in_progress", LIMITS),
                            store.runs.settle_run("f", ALICE, frames(1, "e"), response("f", "failed"), LIMITS),
                            store.runs.read_run("f", ALICE, 0)):
                with pytest.raises(StoreUnavailable):
                    await attempt
    finally:
        await rs.close()
