"""Conversations (``app.state.conversations.ConversationStore``) in the Redis database.

A conversation is three keys renewed on every write: ``c:ID`` (owner, its own fields, item count,
size, next position), ``cz:ID`` (item ids by position) and ``cb:ID`` (item id → encoded item); it is
a member ``c:ID`` of the shared budget, and its items are in the item index. Every operation is one
script.
"""

from __future__ import annotations

import time
from typing import Any

import orjson

from app.state.conversations import (
    Appended,
    ConversationLimits,
    ItemPage,
    ItemsMark,
    ItemsRead,
    StoredConversation,
)
from app.state.items import StoredItem
from app.state.redis.database import COMMON, RedisDatabase

# the Lua every conversation script has (after COMMON: p, owner, unindex, bound)
_CONVERSATION_LUA = """
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

# ARGV[4..]: id, meta, now, ttl, max rows, max bytes, max items, max conversation bytes, then (item id,
# encoded item) pairs → {status, detail, meta, count, size, added ids…}
_CREATE = COMMON + _CONVERSATION_LUA + """
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
_CONVERSATION = COMMON + _CONVERSATION_LUA + """
local c = conversation(ARGV[4])
if not c then return {} end
return {c.meta, c.count, c.size}
"""

# ARGV[4..]: id, metadata, now, ttl, max rows, max bytes, max conversation bytes → {status, detail, meta, count,
# size}. The conversation's fields stay encoded as StoredConversation.encode_meta() does: the creation time kept,
# the metadata replaced.
_UPDATE = COMMON + _CONVERSATION_LUA + """
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
_DROP = COMMON + _CONVERSATION_LUA + """
if not conversation(ARGV[4]) then return 0 end
drop('c:' .. ARGV[4])
return 1
"""

# ARGV[4..]: id, now, ttl, max rows, max bytes, max items, max conversation bytes, skip existing (1/0), then
# (item id, encoded item) pairs → {status, detail, meta, count, size, added ids…}
_ADD = COMMON + _CONVERSATION_LUA + """
local id, now, ttl = ARGV[4], tonumber(ARGV[5]), tonumber(ARGV[6])
local c = conversation(id)
if not c then return {'missing'} end
local result = append(id, c, 12, ARGV[11] == '1', tonumber(ARGV[9]), tonumber(ARGV[10]), now, ttl)
result = view(id, result)
if result[1] == 'ok' then bound(now, ttl, tonumber(ARGV[7]), tonumber(ARGV[8])) end
return result
"""

# ARGV[4..]: id, after ('' for none), limit, descending (1/0) → {} (no conversation), or {'ok', more, bodies…}
_LIST = COMMON + _CONVERSATION_LUA + """
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
_ITEM = COMMON + _CONVERSATION_LUA + """
local c = conversation(ARGV[4])
if not c then return {} end
return {c.meta, c.count, c.size, redis.call('HGET', p .. 'cb:' .. ARGV[4], ARGV[5]) or ''}
"""

# ARGV[4..]: id, item id, now, ttl → {} (no conversation), or {'ok', deleted (1/0), meta, count, size}
_REMOVE = COMMON + _CONVERSATION_LUA + """
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

# ARGV[4..]: id, the mark's next position and count (-1: none) → {} (no conversation), or {meta, count, size,
# next, whole (1/0), encoded items in order…}: those past the mark when the conversation only grew since it
_READ = COMMON + _CONVERSATION_LUA + """
local id, since, had = ARGV[4], tonumber(ARGV[5]), tonumber(ARGV[6])
local c = conversation(id)
if not c then return {} end
local position = tonumber(redis.call('HGET', p .. 'c:' .. id, 'next'))
local ids
local whole = 1
if since >= 0 and position - since >= 0 and position - since == c.count - had then
    ids = redis.call('ZRANGEBYSCORE', p .. 'cz:' .. id, '(' .. since, '+inf')
    whole = 0
else
    ids = redis.call('ZRANGE', p .. 'cz:' .. id, 0, -1)
end
local out = {c.meta, c.count, c.size, position, whole}
for first = 1, #ids, 1000 do  -- (unpack takes a few thousand values at most)
    local last = math.min(first + 999, #ids)
    for _, body in ipairs(redis.call('HMGET', p .. 'cb:' .. id, unpack(ids, first, last))) do table.insert(out, body) end
end
return out
"""


class RedisConversations:
    """See the module docstring."""

    def __init__(self, db: RedisDatabase) -> None:
        self.db = db
        script = db.script
        self._create, self._conversation, self._update = script(_CREATE), script(_CONVERSATION), script(_UPDATE)
        self._drop, self._add, self._list = script(_DROP), script(_ADD), script(_LIST)
        self._item, self._remove, self._read = script(_ITEM), script(_REMOVE), script(_READ)

    def _cap(self, limits: ConversationLimits) -> tuple[int, int]:
        """A conversation's limits in items and bytes (never more bytes than the whole database may)."""
        return limits.items, min(limits.bytes, self.db.max_bytes)

    async def create(self, conversation: StoredConversation, items: list[StoredItem], tenant: str,
                     limits: ConversationLimits) -> Appended:
        db = self.db
        result = await db.call(self._create(args=db.args(
            tenant, conversation.id, conversation.encode_meta(), time.time(), db.ttl, *db.bounds(),
            *self._cap(limits), *_pairs(items))))
        return _appended(conversation.id, result)

    async def get(self, conversation_id: str, tenant: str) -> StoredConversation | None:
        found = await self.db.call(self._conversation(args=self.db.args(tenant, conversation_id)))
        if not found:
            return None
        meta, count, size = found
        return StoredConversation.decode_meta(conversation_id, meta, int(count), int(size))

    async def update(self, conversation_id: str, tenant: str, metadata: dict[str, Any],
                     limits: ConversationLimits) -> Appended:
        db = self.db
        result = await db.call(self._update(args=db.args(
            tenant, conversation_id, orjson.dumps(metadata), time.time(), db.ttl, *db.bounds(),
            self._cap(limits)[1])))
        return _appended(conversation_id, result)

    async def delete(self, conversation_id: str, tenant: str) -> bool:
        return bool(await self.db.call(self._drop(args=self.db.args(tenant, conversation_id))))

    async def add_items(self, conversation_id: str, items: list[StoredItem], tenant: str,
                        limits: ConversationLimits, skip_existing: bool = False) -> Appended:
        db = self.db
        result = await db.call(self._add(args=db.args(
            tenant, conversation_id, time.time(), db.ttl, *db.bounds(), *self._cap(limits),
            "1" if skip_existing else "0", *_pairs(items))))
        return _appended(conversation_id, result)

    async def list_items(self, conversation_id: str, tenant: str, after: str | None, limit: int,
                         descending: bool) -> ItemPage | None:
        found = await self.db.call(self._list(args=self.db.args(
            tenant, conversation_id, after or "", limit, "1" if descending else "0")))
        if not found:
            return None
        _, more, *bodies = found
        return ItemPage([StoredItem.decode(body) for body in bodies], bool(int(more)))

    async def get_item(self, conversation_id: str, item_id: str,
                       tenant: str) -> tuple[StoredConversation | None, StoredItem | None]:
        found = await self.db.call(self._item(args=self.db.args(tenant, conversation_id, item_id)))
        if not found:
            return None, None
        meta, count, size, body = found
        conversation = StoredConversation.decode_meta(conversation_id, meta, int(count), int(size))
        return conversation, StoredItem.decode(body) if body else None

    async def delete_item(self, conversation_id: str, item_id: str,
                          tenant: str) -> tuple[StoredConversation | None, bool]:
        found = await self.db.call(self._remove(args=self.db.args(tenant, conversation_id, item_id, time.time(),
                                                                  self.db.ttl)))
        if not found:
            return None, False
        _, deleted, meta, count, size = found
        return StoredConversation.decode_meta(conversation_id, meta, int(count), int(size)), bool(int(deleted))

    async def read_items(self, conversation_id: str, tenant: str,
                         since: ItemsMark | None = None) -> ItemsRead | None:
        mark = (since.next, since.count) if since is not None else (-1, -1)
        found = await self.db.call(self._read(args=self.db.args(tenant, conversation_id, *mark)))
        if not found:
            return None
        meta, count, size, position, whole, *bodies = found
        conversation = StoredConversation.decode_meta(conversation_id, meta, int(count), int(size))
        return ItemsRead(conversation, [StoredItem.decode(body) for body in bodies], ItemsMark(int(position), int(count)),
                         bool(int(whole)))


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


__all__ = ["RedisConversations"]
