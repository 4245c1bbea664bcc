"""The runs of background responses (``app.state.runs.RunStore``) in the Redis database.

A run is a hash ``toolwire:run:ID`` (owner digest, status, heartbeat, event counters) and its log a
list ``toolwire:runlog:ID`` of batches, both expiring with the run's time to live (renewed on every
write). Beside them, ``toolwire:runs`` (a sorted set of runs by time of last write),
``toolwire:runsizes`` (id → bytes logged) and ``toolwire:runbytes`` (their sum) let every write that
opens a run or grows a log drop aged and then least recently written runs until the runs' own row
and byte bounds hold — in the same script as the write. Heartbeats and ages are Redis' own clock
(``TIME``), so replicas whose clocks disagree still agree on which run is stale.

Opening a run and storing its response are one ``MULTI`` (the run's script and the stored
responses' own ``put`` script, so the response is stored exactly as any other). Settling a run decides on the run's
state and then writes the run and the response in one ``MULTI`` under ``WATCH`` of both keys: a run
or response that changed meanwhile (another replica cancelled it, the client deleted it) makes the
transaction fail, and the decision is taken again on what is there now.
"""

from __future__ import annotations

from typing import Any

from redis.commands.core import AsyncScript
from redis.exceptions import WatchError

from app.state.base import StoreUnavailable
from app.state.redis.database import COMMON, RedisDatabase
from app.state.redis.responses import RedisResponses
from app.state.responses import StoredResponse
from app.state.runs import Batch, RunLimits, RunRead, RunState, settle_status

# scripts of runs call TIME and then write: effects replication (the default from Redis 5) says so first
_HEAD = "redis.replicate_commands()\n"

# Lua functions of every run script (after the database's COMMON: p, owner). ARGV[4] is the run's id.
_RUNS = """
local id = ARGV[4]
local key, log = p .. 'run:' .. id, p .. 'runlog:' .. id
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local function run_state()
    local v = redis.call('HMGET', key, 'status', 'beat', 'seq', 'logged', 'size', 'over', 'batches')
    return {v[1], string.format('%.6f', now - tonumber(v[2])), v[3], v[4], v[5], v[6], v[7]}
end
local function run_drop(victim)
    local size = redis.call('HGET', p .. 'runsizes', victim)
    if size then redis.call('DECRBY', p .. 'runbytes', size) end
    redis.call('HDEL', p .. 'runsizes', victim)
    redis.call('ZREM', p .. 'runs', victim)
    redis.call('DEL', p .. 'run:' .. victim, p .. 'runlog:' .. victim)
end
local function run_bound(ttl, max_rows, max_bytes)
    for _, old in ipairs(redis.call('ZRANGEBYSCORE', p .. 'runs', '-inf', now - ttl)) do
        if old ~= id then run_drop(old) end
    end
    while redis.call('ZCARD', p .. 'runs') > max_rows or
          tonumber(redis.call('GET', p .. 'runbytes') or '0') > max_bytes do
        local oldest = redis.call('ZRANGE', p .. 'runs', 0, 1)
        local victim = oldest[1]
        if victim == id then victim = oldest[2] end
        if not victim then break end
        run_drop(victim)
    end
end
-- log the batch (data, count events) where the log ends, within the bound; set status and heartbeat
local function run_log(data, count, status, max_log, ttl)
    if count > 0 then
        local v = redis.call('HMGET', key, 'size', 'over')
        local len = string.len(data)
        if v[2] == '0' and tonumber(v[1]) + len <= max_log then
            redis.call('RPUSH', log, data)
            redis.call('HINCRBY', key, 'size', len)
            redis.call('HINCRBY', key, 'logged', count)
            redis.call('HINCRBY', key, 'batches', 1)
            redis.call('HINCRBY', p .. 'runsizes', id, len)
            redis.call('INCRBY', p .. 'runbytes', len)
        else
            redis.call('HSET', key, 'over', '1')
        end
    end
    redis.call('HINCRBY', key, 'seq', count)
    redis.call('HSET', key, 'status', status, 'beat', string.format('%.6f', now))
    redis.call('ZADD', p .. 'runs', now, id)
    redis.call('EXPIRE', key, ttl)
    redis.call('EXPIRE', log, ttl)
end
"""

# ARGV[5..]: status, data, count, max log bytes, ttl, max rows, max bytes → the state
_OPEN = """
run_drop(id)
redis.call('HSET', key, 'owner', owner, 'status', ARGV[5], 'beat', string.format('%.6f', now), 'seq', 0,
           'logged', 0, 'size', 0, 'over', '0', 'batches', 0)
redis.call('ZADD', p .. 'runs', now, id)
redis.call('HSET', p .. 'runsizes', id, 0)
run_log(ARGV[6], tonumber(ARGV[7]), ARGV[5], tonumber(ARGV[8]), tonumber(ARGV[9]))
run_bound(tonumber(ARGV[9]), tonumber(ARGV[10]), tonumber(ARGV[11]))
return run_state()
"""

# ARGV[5..]: first, data, count, status, max log bytes, ttl, max rows, max bytes → the state, or {}
# for a run that is not there (or not the tenant's); a run that ended, or whose log does not end
# where the batch begins, is left as it is
_APPEND = """
local v = redis.call('HMGET', key, 'owner', 'status', 'seq')
if v[1] ~= owner then return {} end
if (v[2] ~= 'queued' and v[2] ~= 'in_progress') or tonumber(v[3]) ~= tonumber(ARGV[5]) then return run_state() end
local count = tonumber(ARGV[7])
run_log(ARGV[6], count, ARGV[8], tonumber(ARGV[9]), tonumber(ARGV[10]))
if count > 0 then run_bound(tonumber(ARGV[10]), tonumber(ARGV[11]), tonumber(ARGV[12])) end
return run_state()
"""

# ARGV[5]: the first batch to read (-1: none) → the state and the batches, or {}
_READ = """
if redis.call('HGET', key, 'owner') ~= owner then return {} end
local out = run_state()
local start = tonumber(ARGV[5])
if start >= 0 then
    for _, batch in ipairs(redis.call('LRANGE', log, start, -1)) do table.insert(out, batch) end
end
return out
"""


def _multi(pipe: Any) -> None:
    """Start the transaction of a watched pipeline (its commands are queued from here on)."""
    pipe.multi()


def _state(reply: list[Any]) -> RunState | None:
    if not reply:
        return None
    status, age, seq, logged, size, over, batches = reply[:7]
    return RunState(status.decode(), max(0.0, float(age)), int(seq), int(logged), int(size), over == b"1",
                    int(batches))


class RedisRuns:
    """See the module docstring (``responses``: the stored responses a run's response is stored with)."""

    def __init__(self, db: RedisDatabase, responses: RedisResponses) -> None:
        self.db = db
        self.responses = responses
        script = db.script
        self._run_open: AsyncScript = script(_HEAD + COMMON + _RUNS + _OPEN)
        self._run_append: AsyncScript = script(_HEAD + COMMON + _RUNS + _APPEND)
        self._run_read: AsyncScript = script(_HEAD + COMMON + _RUNS + _READ)

    def _append_args(self, response_id: str, tenant: str, batch: Batch, status: str,
                     limits: RunLimits) -> list[str | bytes | int | float]:
        db = self.db
        return db.args(tenant, response_id, batch.first, batch.data, batch.count, status, limits.events, db.ttl,
                       db.max_rows, db.max_bytes)

    async def open_run(self, record: StoredResponse, tenant: str, batch: Batch, limits: RunLimits) -> None:
        status = str(record.response.get("status") or "queued")

        db = self.db

        async def work() -> None:
            async with db.client.pipeline(transaction=True) as pipe:
                await self.responses.put_call(record, tenant, pipe)
                await self._run_open(args=db.args(tenant, record.id, status, batch.data, batch.count, limits.events,
                                                  db.ttl, db.max_rows, db.max_bytes), client=pipe)
                await pipe.execute()

        await self.db.call(work())

    async def append_run(self, response_id: str, tenant: str, batch: Batch, status: str,
                         limits: RunLimits) -> RunState | None:
        return _state(await self.db.call(self._run_append(args=self._append_args(response_id, tenant, batch, status,
                                                                                    limits))))

    async def read_run(self, response_id: str, tenant: str, start: int | None) -> RunRead | None:
        read: RunRead | None = await self.db.call(self._read(response_id, tenant, start))
        return read

    async def _read(self, response_id: str, tenant: str, start: int | None) -> RunRead | None:
        """``read_run`` within an operation already under way (unguarded: the operation is)."""
        reply = await self._run_read(args=self.db.args(tenant, response_id, -1 if start is None else start))
        state = _state(reply)
        return None if state is None else RunRead(state, list(reply[7:]))

    async def settle_run(self, response_id: str, tenant: str, batch: Batch, record: StoredResponse,
                         limits: RunLimits, stale: float | None = None,
                         if_cancelled: StoredResponse | None = None) -> RunState | None:
        status = settle_status(record)
        watched = (self.db.prefix + "run:" + response_id, self.db.prefix + "r:" + response_id)

        async def attempt() -> tuple[bool, RunState | None]:
            """Whether the decision held (nothing it read changed before it wrote), and the state it left."""
            async with self.db.client.pipeline(transaction=True) as pipe:
                try:
                    await pipe.watch(*watched)
                    read = await self._read(response_id, tenant, None)
                    if read is None:
                        return True, None
                    state = read.state
                    if state.ended:
                        if state.status != "cancelled" or if_cancelled is None or not await pipe.exists(watched[1]):
                            return True, state
                        _multi(pipe)
                        await self.responses.put_call(if_cancelled, tenant, pipe)
                        await pipe.execute()
                        return True, state
                    if state.seq != batch.first or (stale is not None and state.age < stale):
                        return True, state
                    _multi(pipe)
                    await self._run_append(args=self._append_args(response_id, tenant, batch, status, limits),
                                           client=pipe)
                    await self.responses.put_call(record, tenant, pipe)
                    replies = await pipe.execute()
                except WatchError:
                    return False, None
                return True, _state(replies[0])

        for _ in range(16):
            outcome: tuple[bool, RunState | None] = await self.db.call(attempt())
            held, state = outcome
            if held:
                return state
        raise StoreUnavailable("the response store (Redis) is too busy: a background response could not be settled")


__all__ = ["RedisRuns"]
