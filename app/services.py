"""What the process holds for every request, whatever model it serves: settings, metrics, the
concurrency slots, the worker processes heavy request work runs in, the prefix service (what a
conversation's next turn reuses, ``app.prefix``), the pooled HTTP clients, the stores (responses,
conversations, runs) and their background check, the thinking signers and the detached tasks
(background responses, ``app.detached``). ``start()`` opens what needs opening (clients, stores),
``stop()`` closes it. Each face is handed only the part of them it uses (``Face.needs``: the
bundles below).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Self

import httpx

from app.backends.streamhttp import StreamingClient
from app.detached import Detached
from app.errors import APIError
from app.metrics import Metrics
from app.pipeline.generate import Generating
from app.pipeline.offload import Pool, Turns
from app.prefix import OUTCOMES, PrefixService
from app.sched import set_slice
from app.settings import Settings
from app.state import Stores, open_stores
from app.state.health import StoreCheck, StoreState
from app.thinking_signature import ThinkingSigner, signer_for

log = logging.getLogger("toolwire")


class Slots:
    """A bounded number of concurrent requests (``--max-concurrency``); unbounded when ``None``."""

    def __init__(self, limit: int | None, metrics: Metrics | None = None) -> None:
        self.limit = limit
        self.used = 0
        self.metrics = metrics

    def lease(self) -> Lease:
        """A slot for one request (``async with``), or a 429 ``APIError`` when all are taken."""
        if self.limit is not None and self.used >= self.limit:
            if self.metrics is not None:
                self.metrics.rejected.labels("concurrency").inc()
            raise APIError(429, f"too many concurrent requests (limit {self.limit}); retry shortly",
                           "rate_limit_error", code="rate_limit_exceeded", headers={"Retry-After": "1"})
        self.used += 1
        return Lease(self)


class Lease:
    """One request's concurrency slot. It is given back when the ``async with`` block that holds it
    ends — unless it was handed over (``hand_over()``) to a response body that outlives the block (a
    stream), which then gives it back when it ends. Either way, once."""

    def __init__(self, slots: Slots) -> None:
        self._slots = slots
        self._handed = False
        self._held = True

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        if not self._handed:
            self._give_back()

    def hand_over(self) -> Callable[[], None]:
        """The slot's release, for the body that now owns it."""
        self._handed = True
        return self._give_back

    def _give_back(self) -> None:
        if self._held:
            self._held = False
            self._slots.used -= 1


# ------------------------------------------------------------------ what each face uses


@dataclass(frozen=True, slots=True)
class Settled:
    """What a face that only reads the settings uses (the legacy completions passthrough)."""

    settings: Settings


@dataclass(frozen=True, slots=True)
class Answering(Generating):
    """What an answering face uses: generating (``app.pipeline.generate``), and the tenant's signers."""

    signers: Callable[[str], ThinkingSigner]

    def signer(self, tenant: str) -> ThinkingSigner:
        return self.signers(tenant)


@dataclass(frozen=True, slots=True)
class Responding(Answering):
    """The Responses API's: answering, the stores (responses, their conversations and runs), the
    detached tasks of background responses."""

    stores: Stores | None
    detached: Detached


@dataclass(frozen=True, slots=True)
class Keeping:
    """The Conversations API's: the settings, the stores, the tenant's signers, and the prefix
    service (what it keeps of a conversation goes with the conversation)."""

    settings: Settings
    stores: Stores | None
    signers: Callable[[str], ThinkingSigner]
    prefix: PrefixService

    def signer(self, tenant: str) -> ThinkingSigner:
        return self.signers(tenant)


@dataclass
class Services:
    """See the module docstring."""

    settings: Settings
    metrics: Metrics = field(default_factory=Metrics)
    client: httpx.AsyncClient | None = None  # probes and short requests to the backend
    streaming: StreamingClient | None = None  # generation streams
    stores: Stores | None = None  # stored responses, conversations, background responses' runs
    store_check: StoreCheck | None = None  # the store's background check (what readiness reports)

    def __post_init__(self) -> None:
        self.slots = Slots(self.settings.max_concurrency, self.metrics)
        s = self.settings
        self.pool = Pool(s.prepare_workers, s.max_render_ms / 1000, s.max_queue_ms / 1000, s)
        self.turns = Turns()
        # one budget for the server: each uvicorn worker process holds its share (prepare workers keep nothing)
        lookups = {outcome: self.metrics.prefix_lookups.labels(outcome) for outcome in OUTCOMES}
        self.prefix = PrefixService(s.prefix_cache_bytes // max(1, s.workers),
                                    on_lookup=lambda outcome: lookups[outcome].inc(), on_held=self.metrics.prefix_bytes.set)
        self.detached = Detached(self.settings.max_background, self.metrics)  # background responses

    def signer(self, tenant: str) -> ThinkingSigner:
        """Seals and signatures for ``tenant``'s reasoning (``app.thinking_signature``)."""
        return signer_for(self.settings, tenant)

    def store_state(self) -> StoreState | None:
        """The store as its last background check found it (``None``: no store); never waits on it."""
        return self.store_check.state if self.store_check is not None else None

    # what each face is handed (``Face.needs``): the part it uses, never these services whole

    def settled(self) -> Settled:
        return Settled(self.settings)

    def generating(self) -> Generating:
        return Generating(self.settings, self.metrics, self.pool, self.prefix)

    def answering(self) -> Answering:
        return Answering(self.settings, self.metrics, self.pool, self.prefix, self.signer)

    def responding(self) -> Responding:
        return Responding(self.settings, self.metrics, self.pool, self.prefix, self.signer, self.stores, self.detached)

    def keeping(self) -> Keeping:
        return Keeping(self.settings, self.stores, self.signer, self.prefix)

    async def start(self) -> None:
        s = self.settings
        if s.sched_slice_us is not None:
            problem = set_slice(s.sched_slice_us)
            if problem is None:
                log.info("scheduler slice set to %d µs", s.sched_slice_us)
            else:
                log.warning("scheduler slice not set: %s", problem)
        timeout = httpx.Timeout(connect=s.connect_timeout, read=s.read_timeout, write=30.0, pool=s.connect_timeout)
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=256, keepalive_expiry=30)
        self.client = httpx.AsyncClient(timeout=timeout, limits=limits)
        self.streaming = StreamingClient(s.connect_timeout, s.read_timeout)
        self.stores = open_stores(s)
        database = self.stores.database
        self.store_check = StoreCheck(database.ping, database.guard.breaker, s.store_check_interval,
                                      s.store_check_timeout)
        await self.store_check.check()
        self.store_check.start()

    async def stop(self) -> None:
        await self.detached.stop()  # first: a background response cancelled here is marked so in the store
        self.pool.close()
        if self.store_check is not None:
            await self.store_check.stop()
        if self.stores is not None:
            await self.stores.close()
        if self.client is not None:
            await self.client.aclose()
        if self.streaming is not None:
            await self.streaming.close()
