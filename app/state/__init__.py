"""Stored responses (the Responses API's ``store: true``), behind one small interface.

A ``ResponseStore`` keeps ``StoredResponse`` records (``app.state.records``) for ``ttl`` seconds,
each readable only by the tenant that stored it (``tenant``: the request's tenant id, see
``app.tenancy``; the store keeps a keyed digest of it, never the id itself):

* ``put(record, tenant)`` stores (replacing a record with the same id);
* ``get(id, tenant)`` → the record, or ``None`` when it is absent, expired or another tenant's;
* ``delete(id, tenant)`` → whether it was there (and the tenant's);
* ``chain(id, tenant, limits)`` → the responses a continuation from ``id`` builds on, oldest first,
  read in one round trip (SQLite: one recursive query; Redis: one script), within ``limits``;
* ``ping()`` → whether the store answers now (readiness); ``close()``;
* the runs of background responses (``app.state.runs``): ``open_run``, ``append_run``,
  ``settle_run``, ``read_run``.

Every failure to reach or use the store is ``StoreUnavailable``. The store is bounded: by age
(``ttl``), by record count and by the bytes of all its records (the oldest go first, on every
write). ``open_store`` picks the implementation: an embedded SQLite file in ``--state-dir``, or
Redis (``--response-store redis://…``) when several replicas share what they stored.
"""

from __future__ import annotations

from typing import Protocol

from app.settings import Settings
from app.state.records import Chain, ChainLimits, StoredResponse, StoreUnavailable
from app.state.runs import Batch, RunLimits, RunRead, RunState, RunStore


class ResponseStore(RunStore, Protocol):
    async def put(self, record: StoredResponse, tenant: str) -> None: ...

    async def get(self, response_id: str, tenant: str) -> StoredResponse | None: ...

    async def delete(self, response_id: str, tenant: str) -> bool: ...

    async def chain(self, response_id: str, tenant: str, limits: ChainLimits) -> Chain: ...

    async def ping(self) -> bool: ...

    async def close(self) -> None: ...


def open_store(settings: Settings) -> ResponseStore:
    """The configured store (``StoreUnavailable`` with a one-line reason when it cannot be opened)."""
    url = settings.response_store
    if url and url.startswith(("redis://", "rediss://", "unix://")):
        from app.state.redis import RedisStore

        return RedisStore(url, settings.response_ttl, settings.response_store_max,
                          settings.response_store_max_bytes)
    if url:
        raise ValueError(f"--response-store: expected redis://HOST:PORT/DB, got {url!r}")
    from app.state.sqlite import SqliteStore

    return SqliteStore(settings.state_dir / "responses.sqlite3", settings.response_ttl, settings.response_store_max,
                       settings.response_store_max_bytes)


__all__ = ["Batch", "Chain", "ChainLimits", "ResponseStore", "RunLimits", "RunRead", "RunState", "StoreUnavailable",
           "StoredResponse", "open_store"]
