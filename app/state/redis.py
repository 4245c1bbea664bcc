"""The shared response store: Redis, for several toolwire replicas behind one load balancer.

Each response is one key (``toolwire:response:ID``) holding its JSON record, set with an expiry of
``ttl`` seconds, so Redis itself bounds what is kept.
"""

from __future__ import annotations

from typing import Any

import orjson
import redis.asyncio as aioredis

PREFIX = "toolwire:response:"


class RedisStore:
    def __init__(self, url: str, ttl: float) -> None:
        self.ttl = max(1, int(ttl))
        self._client = aioredis.from_url(url)

    async def put(self, key: str, record: dict[str, Any]) -> None:
        await self._client.set(PREFIX + key, orjson.dumps(record), ex=self.ttl)

    async def get(self, key: str) -> dict[str, Any] | None:
        raw = await self._client.get(PREFIX + key)
        return orjson.loads(raw) if raw is not None else None

    async def delete(self, key: str) -> bool:
        return bool(await self._client.delete(PREFIX + key))

    async def close(self) -> None:
        await self._client.aclose()
