"""The shared response store: Redis, for several toolwire replicas behind one load balancer.

Each response is one hash (``toolwire:r:ID``: owner digest, previous id, body) that expires after
``ttl`` seconds. Beside them, ``toolwire:index`` (a sorted set of ids by time), ``toolwire:sizes``
(id → bytes) and ``toolwire:bytes`` (their sum) let every write drop aged and then oldest records
until the store is within its row and byte bounds — in the same server-side script as the write,
so it holds whichever replica wrote. A chain is walked by one script too: one round trip however
long it is, and only the bodies within the limits cross the network. The secret that keys owner
digests lives in Redis (``toolwire:owner-secret``) and the scripts make the digests themselves, so
every replica sharing the store computes the same owners.

Large bodies are decoded off the event loop (``off_loop``). A failed command is retried once on a fresh connection (a pooled connection goes stale when Redis
restarts); every failure after that is ``StoreUnavailable``. Needs a single Redis (or a primary
behind Sentinel): the scripts touch keys of several records, which Redis Cluster does not allow.
"""

from __future__ import annotations

import secrets
import time
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from app.state.records import Chain, ChainLimits, StoredResponse, StoreUnavailable, decode_chain, off_loop

PREFIX = "toolwire:"

# KEYS: none (the scripts derive them from ARGV[1], the prefix: one Redis, not a cluster). ARGV[2] is
# the request's tenant, ARGV[3] a fresh secret proposed in case the store has none yet (first use,
# or a Redis that restarted empty): the owner digest is made in the script from the secret the
# store holds, so every replica agrees on it whatever it saw before.
_COMMON = """
local p = ARGV[1]
local secret = redis.call('GET', p .. 'owner-secret')
if not secret then
    secret = ARGV[3]
    redis.call('SET', p .. 'owner-secret', secret)
end
local owner = redis.sha1hex(secret .. '\\0' .. ARGV[2])
local function drop(id)
    local size = redis.call('HGET', p .. 'sizes', id)
    if size then redis.call('DECRBY', p .. 'bytes', size) end
    redis.call('HDEL', p .. 'sizes', id)
    redis.call('ZREM', p .. 'index', id)
    redis.call('DEL', p .. 'r:' .. id)
end
"""

# ARGV[4..]: id, previous, body, now, ttl, max rows, max bytes
_PUT = _COMMON + """
local id, body = ARGV[4], ARGV[6]
local now, ttl = tonumber(ARGV[7]), tonumber(ARGV[8])
local max_rows, max_bytes = tonumber(ARGV[9]), tonumber(ARGV[10])
drop(id)
redis.call('HSET', p .. 'r:' .. id, 'owner', owner, 'previous', ARGV[5], 'body', body)
redis.call('EXPIRE', p .. 'r:' .. id, ttl)
redis.call('ZADD', p .. 'index', now, id)
redis.call('HSET', p .. 'sizes', id, string.len(body))
redis.call('INCRBY', p .. 'bytes', string.len(body))
for _, old in ipairs(redis.call('ZRANGEBYSCORE', p .. 'index', '-inf', now - ttl)) do drop(old) end
while redis.call('ZCARD', p .. 'index') > max_rows or tonumber(redis.call('GET', p .. 'bytes') or '0') > max_bytes do
    local oldest = redis.call('ZRANGE', p .. 'index', 0, 0)
    if #oldest == 0 then break end
    drop(oldest[1])
end
return owner
"""

# ARGV[4]: id → {owner, body} or {}
_GET = _COMMON + """
local v = redis.call('HMGET', p .. 'r:' .. ARGV[4], 'owner', 'body')
if v[1] ~= owner then return {} end
return {owner, v[2]}
"""

# ARGV[4]: id → 1 when it was there (and the tenant's)
_DELETE = _COMMON + """
if redis.call('HGET', p .. 'r:' .. ARGV[4], 'owner') ~= owner then return 0 end
drop(ARGV[4])
return 1
"""

# ARGV[4..]: first id, max links, max bytes → {owner, missing, over, size, id1, body1, id2, body2, …}
_CHAIN = _COMMON + """
local id = ARGV[4]
local max_links, max_bytes = tonumber(ARGV[5]), tonumber(ARGV[6])
local out, size, links = {owner, '', '', 0}, 0, 0
while id and id ~= '' do
    local v = redis.call('HMGET', p .. 'r:' .. id, 'owner', 'previous', 'body')
    if v[1] ~= owner then out[2] = id; break end
    if links >= max_links then out[3] = 'links'; break end
    if size + string.len(v[3]) > max_bytes then out[3] = 'bytes'; break end
    links = links + 1
    size = size + string.len(v[3])
    table.insert(out, id)
    table.insert(out, v[3])
    id = v[2]
end
out[4] = size
return out
"""

_RETRIED = (RedisConnectionError, RedisTimeoutError, ConnectionError, OSError)

class RedisStore:
    """See the module docstring."""

    def __init__(self, url: str, ttl: float, max_rows: int, max_bytes: int, prefix: str = PREFIX) -> None:
        self.ttl = max(1, int(ttl))
        self.max_rows = max_rows
        self.max_bytes = max_bytes
        self.prefix = prefix
        self._client = aioredis.from_url(url, retry=Retry(NoBackoff(), 1), retry_on_error=list(_RETRIED),
                                         socket_connect_timeout=2.0, socket_timeout=5.0)
        self._put = self._client.register_script(_PUT)
        self._get = self._client.register_script(_GET)
        self._delete = self._client.register_script(_DELETE)
        self._chain = self._client.register_script(_CHAIN)

    async def _call(self, work: Any) -> Any:
        try:
            return await work
        except RedisError as exc:
            raise StoreUnavailable(f"the response store (Redis) failed: {exc}") from None
        except OSError as exc:
            raise StoreUnavailable(f"the response store (Redis) is unreachable: {exc}") from None

    def _args(self, tenant: str, *rest: str | bytes | float) -> list[str | bytes | int | float]:
        return [self.prefix, tenant, secrets.token_bytes(32), *rest]

    async def put(self, record: StoredResponse, tenant: str) -> None:
        await self._call(self._put(args=self._args(tenant, record.id, record.previous_response_id or "",
                                                   record.encode(), time.time(), self.ttl, self.max_rows,
                                                   self.max_bytes)))

    async def get(self, response_id: str, tenant: str) -> StoredResponse | None:
        found = await self._call(self._get(args=self._args(tenant, response_id)))
        if not found:
            return None
        owner, body = found
        return await off_loop(len(body), StoredResponse.decode, response_id, owner.decode(), body)

    async def delete(self, response_id: str, tenant: str) -> bool:
        return bool(await self._call(self._delete(args=self._args(tenant, response_id))))

    async def chain(self, response_id: str, tenant: str, limits: ChainLimits) -> Chain:
        owner, missing, over, size, *pairs = await self._call(
            self._chain(args=self._args(tenant, response_id, limits.links, limits.bytes)))
        ids = [key.decode() for key in pairs[::2]]
        chain = Chain(ids=ids, missing=missing.decode() or None, over=over.decode() or None, size=int(size))
        bodies = dict(zip(ids, pairs[1::2], strict=True))
        return await off_loop(chain.size, decode_chain, chain, owner.decode(), bodies, limits)

    async def ping(self) -> bool:
        try:
            return bool(await self._call(self._client.ping()))
        except StoreUnavailable:
            return False

    async def close(self) -> None:
        await self._client.aclose()

    async def totals(self) -> tuple[int, int]:
        """``(rows, bytes)`` the store holds now."""
        rows = await self._call(self._client.zcard(self.prefix + "index"))
        size = await self._call(self._client.get(self.prefix + "bytes"))
        return int(rows), int(size or 0)
