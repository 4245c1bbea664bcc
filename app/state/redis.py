"""The shared response store: Redis, for several toolwire replicas behind one load balancer.

Each response is one hash (``toolwire:r:ID``: owner digest, previous id, body, its items' ids) that
expires after ``ttl`` seconds. A conversation is three keys renewed on every write: ``c:ID`` (owner,
its own fields, item count, size, next position), ``cz:ID`` (item ids by position) and ``cb:ID``
(item id → encoded item). The item index is one hash per owner and item id, ``i:OWNER:ITEM``
(``r:RESPONSE`` or ``c:CONVERSATION`` → ``1`` when toolwire wrote the item), written and dropped by
the same scripts as what it points to, with the same time to live. Beside them,
``toolwire:index`` (a sorted set of responses, and ``c:ID`` for conversations, by time of last
write), ``toolwire:sizes`` (member → bytes) and ``toolwire:bytes`` (their sum) let every write drop
aged and then oldest records until the store is within its row and byte bounds — in the same
server-side script as the write, so it holds whichever replica wrote. A chain is walked by one
script too: one round trip however long it is, and only the bodies within the limits cross the
network; every other operation is one script as well. The secret that keys owner digests lives in
Redis (``toolwire:owner-secret``) and the scripts make the digests themselves, so every replica
sharing the store computes the same owners.

Large bodies are decoded off the event loop (``off_loop``). A command whose connection failed is retried
once on a fresh connection (a pooled connection goes stale when Redis restarts); one that got no
answer in time is not (a hung Redis would hold it twice as long). Every operation runs through the
store's ``Guard`` (``app.state.health``): bounded in time (``--store-timeout``, also each command's
socket timeout), refused at once while its breaker is open; every failure is ``StoreUnavailable``.
Needs a single Redis (or a primary
behind Sentinel): the scripts touch keys of several records, which Redis Cluster does not allow.
"""

from __future__ import annotations

import inspect
import secrets
import time
from collections.abc import Awaitable, Sequence
from typing import Any

import orjson
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from app.state.conversations import (
    Appended,
    ConversationLimits,
    Found,
    ItemPage,
    StoredConversation,
    StoredItem,
    found_items,
    response_items,
)
from app.state.health import Breaker, Guard
from app.state.records import (
    Chain,
    ChainLimits,
    StoredResponse,
    StoreTimeout,
    StoreUnavailable,
    decode_chain,
    off_loop,
)
from app.state.redis_runs import RedisRuns

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
local function unindex(who, item, holder)
    redis.call('HDEL', p .. 'i:' .. who .. ':' .. item, holder)
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
        local v = redis.call('HMGET', p .. 'r:' .. member, 'owner', 'items')
        if v[1] and v[2] then
            for item in string.gmatch(v[2], '[^\\n]+') do unindex(v[1], item, 'r:' .. member) end
        end
        redis.call('DEL', p .. 'r:' .. member)
    end
end
local function bound(now, ttl, max_rows, max_bytes)
    for _, old in ipairs(redis.call('ZRANGEBYSCORE', p .. 'index', '-inf', now - ttl)) do drop(old) end
    while redis.call('ZCARD', p .. 'index') > max_rows or
          tonumber(redis.call('GET', p .. 'bytes') or '0') > max_bytes do
        local oldest = redis.call('ZRANGE', p .. 'index', 0, 0)
        if #oldest == 0 then break end
        drop(oldest[1])
    end
end
local function conversation(id)
    local v = redis.call('HMGET', p .. 'c:' .. id, 'owner', 'meta', 'count', 'size')
    if v[1] ~= owner then return nil end
    return {meta = v[2], count = tonumber(v[3]), size = tonumber(v[4])}
end
local function touch(id, now, ttl)
    redis.call('EXPIRE', p .. 'c:' .. id, ttl)
    redis.call('EXPIRE', p .. 'cz:' .. id, ttl)
    redis.call('EXPIRE', p .. 'cb:' .. id, ttl)
    redis.call('ZADD', p .. 'index', now, 'c:' .. id)
end
local function resize(id, change)
    redis.call('HINCRBY', p .. 'c:' .. id, 'size', change)
    redis.call('HINCRBY', p .. 'sizes', 'c:' .. id, change)
    redis.call('INCRBY', p .. 'bytes', change)
end
-- add the encoded items ARGV[from], ARGV[from + 2], … (ids before them) to conversation id, unless
-- one is there already (skipped when skip is true) or a limit would be passed: {status, detail, added ids…}
local function append(id, c, from, skip, max_items, max_size, now, ttl)
    local ids, bodies, seen, size = {}, {}, {}, 0
    for k = from, #ARGV, 2 do
        local item = ARGV[k]
        if seen[item] or redis.call('ZSCORE', p .. 'cz:' .. id, item) then
            if not skip then return {'duplicate', item} end
        else
            seen[item] = true
            table.insert(ids, item)
            table.insert(bodies, ARGV[k + 1])
            size = size + string.len(ARGV[k + 1])
        end
    end
    if c.count + #ids > max_items then return {'over', 'items'} end
    if c.size + size > max_size then return {'over', 'bytes'} end
    local out = {'ok', ''}
    for k, item in ipairs(ids) do
        local seq = redis.call('HINCRBY', p .. 'c:' .. id, 'next', 1)
        redis.call('ZADD', p .. 'cz:' .. id, seq, item)
        redis.call('HSET', p .. 'cb:' .. id, item, bodies[k])
        local key = p .. 'i:' .. owner .. ':' .. item
        redis.call('HSET', key, 'c:' .. id, string.sub(bodies[k], 1, 1))
        redis.call('EXPIRE', key, ttl)
        table.insert(out, item)
    end
    redis.call('HINCRBY', p .. 'c:' .. id, 'count', #ids)
    resize(id, size)
    touch(id, now, ttl)
    return out
end
local function view(id, result)
    local c = conversation(id)
    table.insert(result, 3, c.meta)
    table.insert(result, 4, c.count)
    table.insert(result, 5, c.size)
    return result
end
"""

# ARGV[4..]: id, previous, body, now, ttl, max rows, max bytes, item ids ("\\n"-joined), their flags
_PUT = _COMMON + """
local id, body = ARGV[4], ARGV[6]
local now, ttl = tonumber(ARGV[7]), tonumber(ARGV[8])
drop(id)
redis.call('HSET', p .. 'r:' .. id, 'owner', owner, 'previous', ARGV[5], 'body', body, 'items', ARGV[11])
redis.call('EXPIRE', p .. 'r:' .. id, ttl)
local k = 0
for item in string.gmatch(ARGV[11], '[^\\n]+') do
    k = k + 1
    local key = p .. 'i:' .. owner .. ':' .. item
    redis.call('HSET', key, 'r:' .. id, string.sub(ARGV[12], k, k))
    redis.call('EXPIRE', key, ttl)
end
redis.call('ZADD', p .. 'index', now, id)
redis.call('HSET', p .. 'sizes', id, string.len(body))
redis.call('INCRBY', p .. 'bytes', string.len(body))
bound(now, ttl, tonumber(ARGV[9]), tonumber(ARGV[10]))
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

# ARGV[4..]: max bytes of stored responses read, item ids → {'over'}, or {'ok', n, then n times (id, flag,
# kind, encoded conversation item or response id), then (response id, body) for each response named}
_ITEMS = _COMMON + """
local max_bytes = tonumber(ARGV[4])
local out, responses, wanted, size, n = {'ok', 0}, {}, {}, 0, 0
for k = 5, #ARGV do
    local item = ARGV[k]
    local best = nil
    local holders = redis.call('HGETALL', p .. 'i:' .. owner .. ':' .. item)
    for j = 1, #holders, 2 do
        local holder, flag = holders[j], holders[j + 1]
        if not best or (flag == '1' and best[2] ~= '1') then
            local kind, id = string.sub(holder, 1, 1), string.sub(holder, 3)
            if kind == 'c' then
                if redis.call('HGET', p .. 'c:' .. id, 'owner') == owner then
                    local body = redis.call('HGET', p .. 'cb:' .. id, item)
                    if body then best = {item, flag, 'c', body} end
                end
            elseif redis.call('HGET', p .. 'r:' .. id, 'owner') == owner then
                best = {item, flag, 'r', id}
            end
        end
    end
    if best then
        n = n + 1
        for _, v in ipairs(best) do table.insert(out, v) end
        if best[3] == 'r' and not wanted[best[4]] then
            wanted[best[4]] = true
            table.insert(responses, best[4])
        end
    end
end
out[2] = n
for _, id in ipairs(responses) do
    local body = redis.call('HGET', p .. 'r:' .. id, 'body')
    size = size + string.len(body)
    if size > max_bytes then return {'over'} end
    table.insert(out, id)
    table.insert(out, body)
end
return out
"""

# ARGV[4..]: id, meta, now, ttl, max rows, max bytes, max items, max conversation bytes, then (item id,
# encoded item) pairs → {status, detail, meta, count, size, added ids…}
_CREATE = _COMMON + """
local id, meta, now, ttl = ARGV[4], ARGV[5], tonumber(ARGV[6]), tonumber(ARGV[7])
drop('c:' .. id)
redis.call('HSET', p .. 'c:' .. id, 'owner', owner, 'meta', meta, 'count', 0, 'size', string.len(meta), 'next', 0)
local c = {meta = meta, count = 0, size = string.len(meta)}
local result = append(id, c, 12, false, tonumber(ARGV[10]), tonumber(ARGV[11]), now, ttl)
if result[1] ~= 'ok' then
    redis.call('DEL', p .. 'c:' .. id)
    return result
end
redis.call('HINCRBY', p .. 'sizes', 'c:' .. id, string.len(meta))
redis.call('INCRBY', p .. 'bytes', string.len(meta))
touch(id, now, ttl)
result = view(id, result)
bound(now, ttl, tonumber(ARGV[8]), tonumber(ARGV[9]))
return result
"""

# ARGV[4]: id → {meta, count, size} or {}
_CONVERSATION = _COMMON + """
local c = conversation(ARGV[4])
if not c then return {} end
return {c.meta, c.count, c.size}
"""

# ARGV[4..]: id, metadata, now, ttl, max rows, max bytes, max conversation bytes → {status, detail, meta, count,
# size}. The conversation's fields stay encoded as StoredConversation.encode_meta() does: the creation time kept,
# the metadata replaced.
_UPDATE = _COMMON + """
local id, now, ttl = ARGV[4], tonumber(ARGV[6]), tonumber(ARGV[7])
local c = conversation(id)
if not c then return {'missing'} end
local meta = '{"created_at":' .. string.match(c.meta, '^{"created_at":(%d+),') .. ',"metadata":' .. ARGV[5] .. '}'
local change = string.len(meta) - string.len(c.meta)
if c.size + change > tonumber(ARGV[10]) then return view(id, {'over', 'bytes'}) end
redis.call('HSET', p .. 'c:' .. id, 'meta', meta)
resize(id, change)
touch(id, now, ttl)
local result = view(id, {'ok', ''})
bound(now, ttl, tonumber(ARGV[8]), tonumber(ARGV[9]))
return result
"""

# ARGV[4]: id → 1 when it was there (and the tenant's)
_DROP = _COMMON + """
if not conversation(ARGV[4]) then return 0 end
drop('c:' .. ARGV[4])
return 1
"""

# ARGV[4..]: id, now, ttl, max rows, max bytes, max items, max conversation bytes, skip existing (1/0), then
# (item id, encoded item) pairs → {status, detail, meta, count, size, added ids…}
_ADD = _COMMON + """
local id, now, ttl = ARGV[4], tonumber(ARGV[5]), tonumber(ARGV[6])
local c = conversation(id)
if not c then return {'missing'} end
local result = append(id, c, 12, ARGV[11] == '1', tonumber(ARGV[9]), tonumber(ARGV[10]), now, ttl)
result = view(id, result)
if result[1] == 'ok' then bound(now, ttl, tonumber(ARGV[7]), tonumber(ARGV[8])) end
return result
"""

# ARGV[4..]: id, after ('' for none), limit, descending (1/0) → {} (no conversation), or {'ok', more, bodies…}
_LIST = _COMMON + """
local id, after, limit = ARGV[4], ARGV[5], tonumber(ARGV[6])
if not conversation(id) then return {} end
local range = ARGV[7] == '1' and 'ZREVRANGE' or 'ZRANGE'
local start = 0
if after ~= '' then
    local rank = redis.call(ARGV[7] == '1' and 'ZREVRANK' or 'ZRANK', p .. 'cz:' .. id, after)
    if not rank then return {'ok', 0} end
    start = rank + 1
end
local ids = redis.call(range, p .. 'cz:' .. id, start, start + limit)
local out = {'ok', #ids > limit and 1 or 0}
if #ids > limit then table.remove(ids) end
if #ids > 0 then
    for _, body in ipairs(redis.call('HMGET', p .. 'cb:' .. id, unpack(ids))) do table.insert(out, body) end
end
return out
"""

# ARGV[4..]: id, item id → {} (no conversation), or {meta, count, size, encoded item or ''}
_ITEM = _COMMON + """
local c = conversation(ARGV[4])
if not c then return {} end
return {c.meta, c.count, c.size, redis.call('HGET', p .. 'cb:' .. ARGV[4], ARGV[5]) or ''}
"""

# ARGV[4..]: id, item id, now, ttl → {} (no conversation), or {'ok', deleted (1/0), meta, count, size}
_REMOVE = _COMMON + """
local id, item, now, ttl = ARGV[4], ARGV[5], tonumber(ARGV[6]), tonumber(ARGV[7])
if not conversation(id) then return {} end
local body = redis.call('HGET', p .. 'cb:' .. id, item)
if not body then return view(id, {'ok', 0}) end
redis.call('ZREM', p .. 'cz:' .. id, item)
redis.call('HDEL', p .. 'cb:' .. id, item)
unindex(owner, item, 'c:' .. id)
redis.call('HINCRBY', p .. 'c:' .. id, 'count', -1)
resize(id, -string.len(body))
touch(id, now, ttl)
return view(id, {'ok', 1})
"""

# ARGV[4]: id → {} (no conversation), or {'ok', encoded items in order…}
_ALL = _COMMON + """
local id = ARGV[4]
if not conversation(id) then return {} end
local out = {'ok'}
for _, item in ipairs(redis.call('ZRANGE', p .. 'cz:' .. id, 0, -1)) do
    table.insert(out, redis.call('HGET', p .. 'cb:' .. id, item))
end
return out
"""

#: failures retried once on a fresh connection: a connection that broke, never one that got no answer
_RETRIED = (RedisConnectionError, ConnectionError)
#: seconds an operation may take when no guard says otherwise
TIMEOUT = 2.0


class RedisStore(RedisRuns):
    """See the module docstring; the runs of background responses: ``app.state.redis_runs``."""

    def __init__(self, url: str, ttl: float, max_rows: int, max_bytes: int, prefix: str = PREFIX,
                 guard: Guard | None = None) -> None:
        self.ttl = max(1, int(ttl))
        self.max_rows = max_rows
        self.max_bytes = max_bytes
        self.prefix = prefix
        self.guard = guard or Guard(Breaker(), TIMEOUT)
        timeout = self.guard.timeout or TIMEOUT
        self._client = aioredis.from_url(url, retry=Retry(NoBackoff(), 1), retry_on_error=list(_RETRIED),
                                         socket_connect_timeout=min(2.0, timeout), socket_timeout=timeout)
        script = self._client.register_script
        self._put, self._get, self._delete, self._chain = script(_PUT), script(_GET), script(_DELETE), script(_CHAIN)
        self._items = script(_ITEMS)
        self._create, self._conversation, self._update = script(_CREATE), script(_CONVERSATION), script(_UPDATE)
        self._drop, self._add, self._list = script(_DROP), script(_ADD), script(_LIST)
        self._item, self._remove, self._all = script(_ITEM), script(_REMOVE), script(_ALL)
        self._register_runs(_COMMON)

    async def _call(self, work: Any) -> Any:
        """``work`` (a command or script call) through the guard; its failure ``StoreUnavailable``."""
        try:
            return await self.guard.run(self._answer(work))
        finally:
            if inspect.iscoroutine(work) and inspect.getcoroutinestate(work) == inspect.CORO_CREATED:
                work.close()  # refused before it started

    @staticmethod
    async def _answer(work: Any) -> Any:
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

    def _args(self, tenant: str, *rest: str | bytes | float) -> list[str | bytes | int | float]:
        return [self.prefix, tenant, secrets.token_bytes(32), *rest]

    def _bounds(self) -> tuple[int, int]:
        return self.max_rows, self.max_bytes

    def _cap(self, limits: ConversationLimits) -> tuple[int, int]:
        """A conversation's limits in items and bytes (never more bytes than the whole store may)."""
        return limits.items, min(limits.bytes, self.max_bytes)

    # ------------------------------------------------------------------ stored responses

    def _put_call(self, record: StoredResponse, tenant: str, client: Any = None) -> Awaitable[Any]:
        """The ``put`` script's call for ``record`` (on ``client``: a pipeline, to write it with more)."""
        indexed = response_items(record.response, record.input)
        return self._put(args=self._args(
            tenant, record.id, record.previous_response_id or "", record.encode(), time.time(), self.ttl,
            *self._bounds(), "\n".join(key for key, _ in indexed), "".join("1" if t else "0" for _, t in indexed)),
            client=client)

    async def put(self, record: StoredResponse, tenant: str) -> None:
        await self._call(self._put_call(record, tenant))

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

    async def items(self, ids: Sequence[str], tenant: str, limits: ChainLimits) -> Found:
        wanted = list(dict.fromkeys(ids))
        if not wanted:
            return Found()
        status, *rest = await self._call(self._items(args=self._args(tenant, limits.bytes, *wanted)))
        if status == b"over":
            return Found(over=True)
        count = int(rest[0])
        chosen = rest[1:1 + 4 * count]
        best: dict[str, tuple[bool, str, Any]] = {}
        for k in range(0, len(chosen), 4):
            key, flag, kind, what = chosen[k:k + 4]
            best[key.decode()] = (flag == b"1", kind.decode(), what if kind == b"c" else what.decode())
        responses = rest[1 + 4 * count:]
        bodies = {key.decode(): body for key, body in zip(responses[::2], responses[1::2], strict=True)}
        size = sum(map(len, bodies.values())) + sum(len(what) for _, kind, what in best.values() if kind == "c")
        return await off_loop(size, found_items, best, bodies)

    # ------------------------------------------------------------------ conversations

    async def create_conversation(self, conversation: StoredConversation, items: list[StoredItem], tenant: str,
                                  limits: ConversationLimits) -> Appended:
        result = await self._call(self._create(args=self._args(
            tenant, conversation.id, conversation.encode_meta(), time.time(), self.ttl, *self._bounds(),
            *self._cap(limits), *_pairs(items))))
        return _appended(conversation.id, result)

    async def get_conversation(self, conversation_id: str, tenant: str) -> StoredConversation | None:
        found = await self._call(self._conversation(args=self._args(tenant, conversation_id)))
        if not found:
            return None
        meta, count, size = found
        return StoredConversation.decode_meta(conversation_id, meta, int(count), int(size))

    async def update_conversation(self, conversation_id: str, tenant: str, metadata: dict[str, Any],
                                  limits: ConversationLimits) -> Appended:
        result = await self._call(self._update(args=self._args(
            tenant, conversation_id, orjson.dumps(metadata), time.time(), self.ttl, *self._bounds(),
            self._cap(limits)[1])))
        return _appended(conversation_id, result)

    async def delete_conversation(self, conversation_id: str, tenant: str) -> bool:
        return bool(await self._call(self._drop(args=self._args(tenant, conversation_id))))

    async def add_items(self, conversation_id: str, items: list[StoredItem], tenant: str,
                        limits: ConversationLimits, skip_existing: bool = False) -> Appended:
        result = await self._call(self._add(args=self._args(
            tenant, conversation_id, time.time(), self.ttl, *self._bounds(), *self._cap(limits),
            "1" if skip_existing else "0", *_pairs(items))))
        return _appended(conversation_id, result)

    async def list_items(self, conversation_id: str, tenant: str, after: str | None, limit: int,
                         descending: bool) -> ItemPage | None:
        found = await self._call(self._list(args=self._args(
            tenant, conversation_id, after or "", limit, "1" if descending else "0")))
        if not found:
            return None
        _, more, *bodies = found
        return ItemPage([StoredItem.decode(body) for body in bodies], bool(int(more)))

    async def get_item(self, conversation_id: str, item_id: str,
                       tenant: str) -> tuple[StoredConversation | None, StoredItem | None]:
        found = await self._call(self._item(args=self._args(tenant, conversation_id, item_id)))
        if not found:
            return None, None
        meta, count, size, body = found
        conversation = StoredConversation.decode_meta(conversation_id, meta, int(count), int(size))
        return conversation, StoredItem.decode(body) if body else None

    async def delete_item(self, conversation_id: str, item_id: str,
                          tenant: str) -> tuple[StoredConversation | None, bool]:
        found = await self._call(self._remove(args=self._args(tenant, conversation_id, item_id, time.time(),
                                                              self.ttl)))
        if not found:
            return None, False
        _, deleted, meta, count, size = found
        return StoredConversation.decode_meta(conversation_id, meta, int(count), int(size)), bool(int(deleted))

    async def conversation_items(self, conversation_id: str, tenant: str) -> list[StoredItem] | None:
        found = await self._call(self._all(args=self._args(tenant, conversation_id)))
        if not found:
            return None
        return [StoredItem.decode(body) for body in found[1:]]

    # ------------------------------------------------------------------ health

    async def ping(self) -> bool:
        """Whether Redis answers now (past the guard: this is what its checks probe with)."""
        try:
            return bool(await self._answer(self._client.ping()))
        except StoreUnavailable:
            return False

    async def close(self) -> None:
        await self._client.aclose()

    async def totals(self) -> tuple[int, int]:
        """``(rows, bytes)`` the store holds now."""
        rows = await self._call(self._client.zcard(self.prefix + "index"))
        size = await self._call(self._client.get(self.prefix + "bytes"))
        return int(rows), int(size or 0)


def _pairs(items: list[StoredItem]) -> list[str | bytes]:
    """Items as script arguments: id, encoded item, id, encoded item, …"""
    return [value for item in items for value in (item.id, item.encode())]


def _appended(conversation_id: str, result: list[Any]) -> Appended:
    """A conversation script's answer (``{status, detail, meta, count, size, added ids…}``)."""
    status = result[0].decode()
    if status == "missing":
        return Appended()
    detail = result[1].decode()
    conversation = (StoredConversation.decode_meta(conversation_id, result[2], int(result[3]), int(result[4]))
                    if len(result) >= 5 else None)
    if status == "duplicate":
        return Appended(conversation, duplicate=detail)
    if status == "over":
        return Appended(conversation, over="items" if detail == "items" else "bytes")
    return Appended(conversation, [key.decode() for key in result[5:]])
