"""Following a background response from any replica sharing the store (``background`` generates
it): ``GET /v1/responses/{id}`` (``current``: its status as its run has it), ``GET
…?stream=true&starting_after=N`` (``resume``: the logged events after number ``N``, then each new
batch until the end), ``POST …/cancel`` (``cancel``), and the cancel that comes before a delete.

Each of them finding the run's heartbeat older than ``--background-stale-seconds`` ends it
``failed`` first (``declare_failed``: its replica stopped — a crash, a SIGKILL, a lost store), so
no response stays ``in_progress`` forever whichever replica is asked.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any, TypeVar

from starlette.responses import Response

from app.api.answer import Exchange
from app.api.responses.background import cancelled_event, drop_events, run_limits, store_call, with_status
from app.api.responses.encode import error_event, failed_events, failed_response
from app.api.responses.history import not_found, stores_of
from app.api.sse import SSEResponse
from app.errors import bad_request
from app.services import Responding
from app.settings import Settings
from app.state import Batch, ResponseStore, RunState, RunStore, StoredResponse, StoreUnavailable
from app.state.runs import UNFINISHED

log = logging.getLogger("toolwire")
T = TypeVar("T")

#: seconds between reads of a resumed stream waiting for new events
POLL = 0.25


async def _get(responses: ResponseStore, response_id: str, tenant: str) -> StoredResponse:
    record = await store_call(responses.get(response_id, tenant))
    if record is None:
        raise not_found(response_id)
    return record


async def declare_failed(runs: RunStore, record: StoredResponse, state: RunState, tenant: str,
                         settings: Settings) -> RunState | None:
    """End the run of ``record`` ``failed`` if its heartbeat is (still) stale: its replica stopped."""
    stale = settings.background_stale_seconds
    message = (f"the server generating this response stopped: it has not reported for {state.age:.0f} s "
               f"(--background-stale-seconds {stale:g})")
    shell = {**record.response, "status": "in_progress"}
    data, failed = failed_events(state.seq, shell, list(record.response.get("output") or []), "server_error",
                                 message)
    log.warning("background response %s declared failed: no heartbeat for %.0f s", record.id, state.age)
    return await runs.settle_run(record.id, tenant, Batch(state.seq, data, 2), with_status(record, failed),
                                  run_limits(settings), stale=stale)


async def current(ex: Exchange[Responding], response_id: str) -> dict[str, Any]:
    """The response object ``GET /v1/responses/{id}`` answers: as stored, with a background
    response's status as its run has it (a stale run declared failed first)."""
    stores = stores_of(ex.services)
    tenant = ex.tenant
    record = await _get(stores.responses, response_id, tenant)
    response = record.response
    if not response.get("background") or response.get("status") not in UNFINISHED:
        return response
    read = await store_call(stores.runs.read_run(response_id, tenant, None))
    if read is None:
        return failed_response(response, list(response.get("output") or []),
                               "the state of this background response is no longer kept (it expired, or the "
                               "store's bounds dropped it)")
    state = read.state
    if not state.ended and state.age >= ex.settings.background_stale_seconds:
        settled: RunState | None = await store_call(declare_failed(stores.runs, record, state, tenant,
                                                                   ex.settings))
        state = settled or state
    if state.ended:  # the response as stored with the ending (read after the run, so never older)
        again = await _get(stores.responses, response_id, tenant)
        ended = again.response.get("status") not in UNFINISHED
        return again.response if ended else {**again.response, "status": state.status}
    return {**response, "status": state.status}


async def resume(ex: Exchange[Responding], response_id: str, starting_after: int | None) -> Response:
    """``GET /v1/responses/{id}?stream=true&starting_after=N``: the events after number ``N`` (all
    of them without it)."""
    after = -1 if starting_after is None else starting_after
    stores = stores_of(ex.services)
    tenant = ex.tenant
    record = await _get(stores.responses, response_id, tenant)
    if not record.response.get("background"):
        raise bad_request(f"response {response_id!r} was not created with background: true; only background "
                          "responses can be streamed again (retrieve it without stream)", "stream")
    read = await store_call(stores.runs.read_run(response_id, tenant, 0))
    if read is None:
        raise bad_request(f"the events of response {response_id!r} are no longer kept (expired, or dropped by "
                          "the store's bounds); retrieve it without stream", "stream", code="stream_unavailable")
    return SSEResponse(follow(stores.runs, record, tenant, ex.settings, after, read.state, read.batches))


async def follow(runs: RunStore, record: StoredResponse, tenant: str, settings: Settings, after: int,
                 state: RunState, batches: list[bytes]) -> AsyncIterator[bytes]:
    """The logged events numbered after ``after`` (``state`` and ``batches``: the first read), then
    each new batch as it is logged, until the run ends. A run whose replica stopped is declared
    failed here; a log past its bound, a store that fails or a run gone end the stream with an
    ``error`` event."""
    read_from, skip = 0, after + 1
    while True:
        for data in batches:
            read_from += 1
            if skip:
                data, skip = drop_events(data, skip)
            if data:
                yield data
        if state.over:
            yield error_event(state.logged, "stream_too_large",
                              f"the events of this response passed {settings.background_events_max_bytes} bytes "
                              "(--background-events-max-bytes) and the rest were not kept; the response goes on: "
                              f"poll GET /v1/responses/{record.id}")
            return
        if state.ended:
            return
        if state.age >= settings.background_stale_seconds:
            with contextlib.suppress(StoreUnavailable):
                await declare_failed(runs, record, state, tenant, settings)
        await asyncio.sleep(POLL)
        try:
            read = await runs.read_run(record.id, tenant, read_from)
        except StoreUnavailable as exc:
            log.warning("resumed stream of %s ended: %s", record.id, exc)
            yield error_event(state.logged, "store_unavailable",
                              "the response store is unavailable; resume the stream shortly")
            return
        if read is None:
            yield error_event(state.logged, "not_found", "the response is no longer kept")
            return
        state, batches = read.state, read.batches


# ------------------------------------------------------------------------------------- cancelling


async def cancel_run(services: Responding, record: StoredResponse, tenant: str) -> None:
    """End the run of a background response ``cancelled`` unless it ended already, and cancel its
    task when it runs in this process (the backend request closed at once)."""
    stores = stores_of(services)
    settings = services.settings
    for _ in range(8):
        if record.response.get("status") not in UNFINISHED:
            break
        read = await store_call(stores.runs.read_run(record.id, tenant, None))
        if read is None or read.state.ended:
            break
        seq = read.state.seq
        cancelled = with_status(record, {**record.response, "status": "cancelled"})
        state = await store_call(stores.runs.settle_run(record.id, tenant, Batch(seq, cancelled_event(seq), 1),
                                                        cancelled, run_limits(settings)))
        if state is None or state.ended:
            break
        record = await _get(stores.responses, record.id, tenant)  # its log moved on: again, from where it ends
    services.detached.cancel(record.id)


async def cancel(ex: Exchange[Responding], response_id: str) -> dict[str, Any]:
    """``POST /v1/responses/{id}/cancel``: the response, cancelled unless it had ended (then as it
    ended: cancelling twice is cancelling once)."""
    record = await _get(stores_of(ex.services).responses, response_id, ex.tenant)
    if not record.response.get("background"):
        raise bad_request(f"response {response_id!r} was not created with background: true; only background "
                          "responses can be cancelled", code="not_background")
    await cancel_run(ex.services, record, ex.tenant)
    return await current(ex, response_id)


async def before_delete(ex: Exchange[Responding], response_id: str) -> None:
    """A background response still under way is cancelled before it is deleted (else its task would
    store it again when it ends)."""
    record = await store_call(stores_of(ex.services).responses.get(response_id, ex.tenant))
    if record is not None and record.response.get("background") and record.response.get("status") in UNFINISHED:
        await cancel_run(ex.services, record, ex.tenant)




__all__ = ["before_delete", "cancel", "current", "declare_failed", "follow", "resume"]
