"""The shared Redis database, for several toolwire replicas behind one load balancer: the client,
and what the three stores on it (``responses``, ``conversations``, ``runs``) share.

Every operation is one server-side script (settling a run: one watched transaction), so it holds
whichever replica runs it. ``toolwire:index`` (a sorted set of stored responses, and ``c:ID`` for
conversations, by time of last write), ``toolwire:sizes`` (member → bytes) and ``toolwire:bytes``
(their sum) are the budget stored responses and conversations share: every write drops aged and
then oldest records of either kind until it holds again (``bound`` in ``COMMON``, the Lua every
script starts with); ``removals:OWNER`` counts the owner's stored responses removed (``drop``).
What stored responses echo of their requests (``StoredResponse.parts``) is one hash per owner and
content, ``e:OWNER:DIGEST`` (its body, and how many responses hold it), counted in the same budget
(``toolwire:sizes``) and kept in ``toolwire:echoes`` by the time it was last stored: it goes with
the last response that holds it, or aged as they are (``drop_echo``, ``keep_echo``).
The secret that keys owner digests lives in Redis (``toolwire:owner-secret``) and the scripts make
the digests themselves, so every replica sharing the database computes the same owners.

A command whose connection failed is retried once on a fresh connection (a pooled connection goes
stale when Redis restarts); one that got no answer in time is not (a hung Redis would hold it twice
as long). Every operation runs through the database's ``Guard`` (``app.state.health``): bounded in
time (``--store-timeout``, also each command's socket timeout), refused at once while its breaker is
open; every failure is ``StoreUnavailable``. Needs a single Redis (or a primary behind Sentinel):
the scripts touch keys of several records, which Redis Cluster does not allow.
"""

from __future__ import annotations

import inspect
import secrets
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from app.state.base import StoreTimeout, StoreUnavailable
from app.state.health import Breaker, Guard

PREFIX = "toolwire:"
#: failures retried once on a fresh connection: a connection that broke, never one that got no answer
_RETRIED = (RedisConnectionError, ConnectionError)
#: seconds an operation may take when no guard says otherwise
TIMEOUT = 2.0
# KEYS: none (the scripts derive them from ARGV[1], the prefix: one Redis, not a cluster). ARGV[2] is
# the request's tenant, ARGV[3] a fresh secret proposed in case the store has none yet (first use,
# or a Redis that restarted empty): the owner digest is made in the script from the secret the
# store holds, so every replica agrees on it whatever it saw before.
COMMON = """
local p = ARGV[1]
local secret = redis.call('GET', p .. 'owner-secret')
if not secret then
    secret = ARGV[3]
    redis.call('SET', p .. 'owner-secret', secret)
end
local owner = redis.sha1hex(secret .. '\\0' .. ARGV[2])
local function unindex(who, item, holder)
    redis.call('HDEL', p .. 'i:' .. who .. ':' .. item, holder)
end
local function drop_echo(echo)
    local size = redis.call('HGET', p .. 'sizes', echo)
    if size then redis.call('DECRBY', p .. 'bytes', size) end
    redis.call('HDEL', p .. 'sizes', echo)
    redis.call('ZREM', p .. 'echoes', echo)
    redis.call('DEL', p .. echo)
end
local function keep_echo(echo, body, now, ttl)
    if redis.call('HINCRBY', p .. echo, 'refs', 1) == 1 then
        local size = redis.call('HGET', p .. 'sizes', echo)
        if size then redis.call('DECRBY', p .. 'bytes', size) end
        redis.call('HSET', p .. echo, 'body', body)
        redis.call('HSET', p .. 'sizes', echo, string.len(body))
        redis.call('INCRBY', p .. 'bytes', string.len(body))
    end
    redis.call('EXPIRE', p .. echo, ttl)
    redis.call('ZADD', p .. 'echoes', now, echo)
end
local function drop(member)
    local size = redis.call('HGET', p .. 'sizes', member)
    if size then redis.call('DECRBY', p .. 'bytes', size) end
    redis.call('HDEL', p .. 'sizes', member)
    redis.call('ZREM', p .. 'index', member)
    if string.sub(member, 1, 2) == 'c:' then
        local id = string.sub(member, 3)
        local who = redis.call('HGET', p .. 'c:' .. id, 'owner')
        if who then
            for _, item in ipairs(redis.call('ZRANGE', p .. 'cz:' .. id, 0, -1)) do unindex(who, item, member) end
        end
        redis.call('DEL', p .. 'c:' .. id, p .. 'cz:' .. id, p .. 'cb:' .. id)
    else
        local v = redis.call('HMGET', p .. 'r:' .. member, 'owner', 'items', 'echo')
        if v[1] and v[2] then
            for item in string.gmatch(v[2], '[^\\n]+') do unindex(v[1], item, 'r:' .. member) end
        end
        if v[1] then redis.call('INCR', p .. 'removals:' .. v[1]) end
        redis.call('DEL', p .. 'r:' .. member)
        if v[1] and v[3] and v[3] ~= '' then
            local echo = 'e:' .. v[1] .. ':' .. v[3]
            if redis.call('HINCRBY', p .. echo, 'refs', -1) <= 0 then drop_echo(echo) end
        end
    end
end
local function bound(now, ttl, max_rows, max_bytes)
    for _, old in ipairs(redis.call('ZRANGEBYSCORE', p .. 'index', '-inf', now - ttl)) do drop(old) end
    for _, old in ipairs(redis.call('ZRANGEBYSCORE', p .. 'echoes', '-inf', now - ttl)) do drop_echo(old) end
    while redis.call('ZCARD', p .. 'index') > max_rows or
          tonumber(redis.call('GET', p .. 'bytes') or '0') > max_bytes do
        local oldest = redis.call('ZRANGE', p .. 'index', 0, 0)
        if #oldest == 0 then break end
        drop(oldest[1])
    end
end
"""


class RedisDatabase:
    """See the module docstring."""

    def __init__(self, url: str, ttl: float, max_rows: int, max_bytes: int, prefix: str = PREFIX,
                 guard: Guard | None = None) -> None:
        self.ttl = max(1, int(ttl))
        self.max_rows = max_rows
        self.max_bytes = max_bytes
        self.prefix = prefix
        self.guard = guard or Guard(Breaker(), TIMEOUT)
        timeout = self.guard.timeout or TIMEOUT
        self.client = aioredis.from_url(url, retry=Retry(NoBackoff(), 1), retry_on_error=list(_RETRIED),
                                        socket_connect_timeout=min(2.0, timeout), socket_timeout=timeout)
        self.script = self.client.register_script

    async def call(self, work: Any) -> Any:
        """``work`` (a command or script call) through the guard; its failure ``StoreUnavailable``."""
        try:
            return await self.guard.run(self.answer(work))
        finally:
            if inspect.iscoroutine(work) and inspect.getcoroutinestate(work) == inspect.CORO_CREATED:
                work.close()  # refused before it started

    @staticmethod
    async def answer(work: Any) -> Any:
        """``work``'s answer, unguarded (within an operation already under way), its failure
        ``StoreUnavailable``."""
        try:
            return await work
        except RedisTimeoutError as exc:
            raise StoreTimeout(f"the response store (Redis) did not answer in time: {exc}") from None
        except RedisError as exc:
            raise StoreUnavailable(f"the response store (Redis) failed: {exc}") from None
        except TimeoutError as exc:
            raise StoreTimeout(f"the response store (Redis) did not answer in time: {exc}") from None
        except OSError as exc:
            raise StoreUnavailable(f"the response store (Redis) is unreachable: {exc}") from None

    def args(self, tenant: str, *rest: str | bytes | float) -> list[str | bytes | int | float]:
        """A script's arguments: the prefix, the tenant, a fresh secret (in case there is none yet), ``rest``."""
        return [self.prefix, tenant, secrets.token_bytes(32), *rest]

    def bounds(self) -> tuple[int, int]:
        return self.max_rows, self.max_bytes

    # ------------------------------------------------------------------ health

    async def ping(self) -> bool:
        """Whether Redis answers now (past the guard: this is what its checks probe with)."""
        try:
            return bool(await self.answer(self.client.ping()))
        except StoreUnavailable:
            return False

    async def close(self) -> None:
        await self.client.aclose()

    async def totals(self) -> tuple[int, int]:
        """``(records, bytes)`` of stored responses and conversations now (tests and operations)."""
        rows = await self.call(self.client.zcard(self.prefix + "index"))
        size = await self.call(self.client.get(self.prefix + "bytes"))
        return int(rows), int(size or 0)


__all__ = ["COMMON", "PREFIX", "TIMEOUT", "RedisDatabase"]
