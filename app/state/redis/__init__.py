"""The shared store: the three stores (``app.state``) on one Redis — ``database`` (the client, the
Lua every script shares, the shared budget), ``responses``, ``conversations``, ``runs``."""

from __future__ import annotations

from app.state import Stores
from app.state.health import Guard
from app.state.redis.conversations import RedisConversations
from app.state.redis.database import PREFIX, RedisDatabase
from app.state.redis.responses import RedisResponses
from app.state.redis.runs import RedisRuns


def open_redis(url: str, ttl: float, max_rows: int, max_bytes: int, prefix: str = PREFIX,
               guard: Guard | None = None) -> Stores:
    """The three stores on the Redis at ``url`` (nothing is sent to it until the first operation)."""
    db = RedisDatabase(url, ttl, max_rows, max_bytes, prefix, guard)
    responses = RedisResponses(db)
    return Stores(responses, RedisConversations(db), RedisRuns(db, responses), db)


__all__ = ["PREFIX", "RedisDatabase", "open_redis"]
