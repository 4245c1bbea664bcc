"""Stored responses (``app.state.responses.ResponseStore``) in the Redis database.

Each response is one hash (``toolwire:r:ID``: owner digest, previous id, body, its items' ids) that
expires after ``ttl`` seconds, and a member of the shared budget. The item index is one hash per
owner and item id, ``i:OWNER:ITEM`` (``r:RESPONSE`` or ``c:CONVERSATION`` → ``1`` when toolwire
wrote the item), written and dropped by the same scripts as what it points to, with the same time
to live. A chain is walked by one script: one round trip however long it is, and only the bodies
within the limits cross the network. Large bodies are decoded off the event loop (``off_loop``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Sequence
from typing import Any

from app.state.base import off_loop
from app.state.items import Found, found_items, response_items
from app.state.redis.database import COMMON, RedisDatabase
from app.state.responses import Chain, ChainLimits, StoredResponse, decode_chain, decode_record

# ARGV[4..]: id, previous, body, now, ttl, max rows, max bytes, item ids ("\\n"-joined), their flags, the echo's
# digest ('' when it is in the body) and the echo
_PUT = COMMON + """
local id, body = ARGV[4], ARGV[6]
local now, ttl = tonumber(ARGV[7]), tonumber(ARGV[8])
drop(id)
if ARGV[13] ~= '' then keep_echo('e:' .. owner .. ':' .. ARGV[13], ARGV[14], now, ttl) end
redis.call('HSET', p .. 'r:' .. id, 'owner', owner, 'previous', ARGV[5], 'body', body, 'items', ARGV[11],
           'echo', ARGV[13])
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

# ARGV[4]: id → {owner, body, its echo or ''} or {}
_GET = COMMON + """
local v = redis.call('HMGET', p .. 'r:' .. ARGV[4], 'owner', 'body', 'echo')
if v[1] ~= owner then return {} end
local echo = ''
if v[3] and v[3] ~= '' then echo = redis.call('HGET', p .. 'e:' .. owner .. ':' .. v[3], 'body') or '' end
return {owner, v[2], echo}
"""

# ARGV[4]: id → 1 when it was there (and the tenant's)
_DELETE = COMMON + """
if redis.call('HGET', p .. 'r:' .. ARGV[4], 'owner') ~= owner then return 0 end
drop(ARGV[4])
return 1
"""

# ARGV[4..]: first id, max links, max bytes → {owner, missing, over, size, links, id1, body1, echo digest1, …, then
# (digest, echo) for each different echo}
_CHAIN = COMMON + """
local id = ARGV[4]
local max_links, max_bytes = tonumber(ARGV[5]), tonumber(ARGV[6])
local out, size, links, echoes = {owner, '', '', 0, 0}, 0, 0, {}
while id and id ~= '' do
    local v = redis.call('HMGET', p .. 'r:' .. id, 'owner', 'previous', 'body', 'echo')
    if v[1] ~= owner then out[2] = id; break end
    if links >= max_links then out[3] = 'links'; break end
    if size + string.len(v[3]) > max_bytes then out[3] = 'bytes'; break end
    links = links + 1
    size = size + string.len(v[3])
    local digest = v[4] or ''
    table.insert(out, id)
    table.insert(out, v[3])
    table.insert(out, digest)
    if digest ~= '' then echoes[digest] = true end
    id = v[2]
end
out[4], out[5] = size, links
for digest, _ in pairs(echoes) do
    table.insert(out, digest)
    table.insert(out, redis.call('HGET', p .. 'e:' .. owner .. ':' .. digest, 'body') or '')
end
return out
"""

# ARGV[4..]: first id, max links, max bytes → {missing, over, size, removals, ms until the first of the walked
# responses expires (by Redis's own clock; -1: none expires), id1, id2, …} (the chain's links, no bodies)
_LINKS = COMMON + """
local id = ARGV[4]
local max_links, max_bytes = tonumber(ARGV[5]), tonumber(ARGV[6])
local out, size, links = {'', '', 0, 0, -1}, 0, 0
while id and id ~= '' do
    local v = redis.call('HMGET', p .. 'r:' .. id, 'owner', 'previous')
    if v[1] ~= owner then out[1] = id; break end
    local length = redis.call('HSTRLEN', p .. 'r:' .. id, 'body')
    if links >= max_links then out[2] = 'links'; break end
    if size + length > max_bytes then out[2] = 'bytes'; break end
    links = links + 1
    size = size + length
    local left = redis.call('PTTL', p .. 'r:' .. id)
    if left >= 0 and (out[5] < 0 or left < out[5]) then out[5] = left end
    table.insert(out, id)
    id = v[2]
end
out[3] = size
out[4] = tonumber(redis.call('GET', p .. 'removals:' .. owner) or '0')
return out
"""

# ARGV[4]: id → {} when it is not there (or another tenant's), else {the owner's count of removed responses}
_REMOVALS = COMMON + """
if redis.call('HGET', p .. 'r:' .. ARGV[4], 'owner') ~= owner then return {} end
return {tonumber(redis.call('GET', p .. 'removals:' .. owner) or '0')}
"""

# ARGV[4..]: max bytes of stored responses read, item ids → {'over'}, or {'ok', n, then n times (id, flag,
# kind, encoded conversation item or response id), then (response id, body) for each response named}
_ITEMS = COMMON + """
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


class RedisResponses:
    """See the module docstring."""

    def __init__(self, db: RedisDatabase) -> None:
        self.db = db
        self._put, self._get, self._delete = db.script(_PUT), db.script(_GET), db.script(_DELETE)
        self._chain, self._items, self._links = db.script(_CHAIN), db.script(_ITEMS), db.script(_LINKS)
        self._removals = db.script(_REMOVALS)

    def put_call(self, record: StoredResponse, tenant: str, client: Any = None) -> Awaitable[Any]:
        """The ``put`` script's call for ``record`` (on ``client``: a pipeline, to write it with more)."""
        indexed = response_items(record.response, record.input)
        body, echo, digest = record.parts()
        db = self.db
        return self._put(args=db.args(
            tenant, record.id, record.previous_response_id or "", body, time.time(), db.ttl,
            *db.bounds(), "\n".join(key for key, _ in indexed), "".join("1" if t else "0" for _, t in indexed),
            digest.hex() if digest is not None else "", echo or b""), client=client)

    async def put(self, record: StoredResponse, tenant: str) -> None:
        await self.db.call(self.put_call(record, tenant))

    async def get(self, response_id: str, tenant: str) -> StoredResponse | None:
        found = await self.db.call(self._get(args=self.db.args(tenant, response_id)))
        if not found:
            return None
        owner, body, echo = found
        return await off_loop(len(body) + len(echo), decode_record, response_id, owner.decode(), body, echo or None)

    async def delete(self, response_id: str, tenant: str) -> bool:
        return bool(await self.db.call(self._delete(args=self.db.args(tenant, response_id))))

    async def chain(self, response_id: str, tenant: str, limits: ChainLimits) -> Chain:
        owner, missing, over, size, links, *rest = await self.db.call(
            self._chain(args=self.db.args(tenant, response_id, limits.links, limits.bytes)))
        walked, different = rest[:3 * int(links)], rest[3 * int(links):]
        ids = [key.decode() for key in walked[::3]]
        chain = Chain(ids=ids, missing=missing.decode() or None, over=over.decode() or None, size=int(size))
        bodies = dict(zip(ids, walked[1::3], strict=True))
        shared = dict(zip(different[::2], different[1::2], strict=True))
        echoes = {key: shared[digest] for key, digest in zip(ids, walked[2::3], strict=True) if shared.get(digest)}
        return await off_loop(chain.size + sum(map(len, shared.values())), decode_chain, chain, owner.decode(),
                              bodies, limits, echoes)

    async def links(self, response_id: str, tenant: str, limits: ChainLimits) -> Chain:
        asked = time.time()  # (the expiry is Redis's time left, counted on this clock from before the call)
        missing, over, size, removals, left, *ids = await self.db.call(
            self._links(args=self.db.args(tenant, response_id, limits.links, limits.bytes)))
        expires = asked + int(left) / 1000 if int(left) >= 0 else math.inf
        return Chain(ids=[key.decode() for key in ids], missing=missing.decode() or None, over=over.decode() or None,
                     size=int(size), removals=int(removals), expires=expires)

    async def removals(self, response_id: str, tenant: str) -> int | None:
        found = await self.db.call(self._removals(args=self.db.args(tenant, response_id)))
        return int(found[0]) if found else None

    async def items(self, ids: Sequence[str], tenant: str, limits: ChainLimits) -> Found:
        wanted = list(dict.fromkeys(ids))
        if not wanted:
            return Found()
        status, *rest = await self.db.call(self._items(args=self.db.args(tenant, limits.bytes, *wanted)))
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


__all__ = ["RedisResponses"]
