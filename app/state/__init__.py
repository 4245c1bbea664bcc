"""Stored responses (the Responses API's ``store: true``), behind one small interface.

A ``ResponseStore`` keeps one JSON record per response id for ``ttl`` seconds: ``put`` (replaces),
``get`` (``None`` when absent or expired), ``delete`` (whether it was there). ``open_store`` picks
the implementation from the settings: an embedded SQLite file in ``--state-dir`` (bounded by
``--response-store-max``), or Redis (``--response-store redis://…``) when several replicas must
share what they stored.
"""

from __future__ import annotations

from typing import Any, Protocol

from app.settings import Settings


class ResponseStore(Protocol):
    async def put(self, key: str, record: dict[str, Any]) -> None: ...

    async def get(self, key: str) -> dict[str, Any] | None: ...

    async def delete(self, key: str) -> bool: ...

    async def close(self) -> None: ...


def open_store(settings: Settings) -> ResponseStore:
    url = settings.response_store
    if url and url.startswith(("redis://", "rediss://", "unix://")):
        from app.state.redis import RedisStore

        return RedisStore(url, settings.response_ttl)
    if url:
        raise ValueError(f"--response-store: expected redis://HOST:PORT/DB, got {url!r}")
    from app.state.sqlite import SqliteStore

    return SqliteStore(settings.state_dir / "responses.sqlite3", settings.response_ttl, settings.response_store_max)
