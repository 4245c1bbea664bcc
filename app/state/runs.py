"""Background responses in the store: each one's *run* — its status as generation proceeds, a heartbeat,
and its stream of events — kept beside its stored response, so any replica can poll it, cancel it or
resume its stream while another generates it.

A run belongs to the tenant of its response (the same owner digest). Its events are a log of
``Batch``es: each batch is the encoded SSE frames of ``count`` consecutive events, the first numbered
``first`` (events are numbered from 0 by their ``sequence_number``). A batch is appended only where
the log ends (``first`` equal to the run's ``seq``), so a batch written twice — a write whose answer
was lost, retried — is never logged twice: the writer sees ``seq`` past its batch and drops what is
already there. The log is bounded in bytes per run (``RunLimits.events``): past it nothing more is
logged (``over``) though ``seq`` still counts, and the response itself goes on.

The operations (every one a single transaction: SQLite; a script, or a watched transaction: Redis):

* ``open_run(record, tenant, batch, limits)`` stores the response (``queued``) and opens its run
  with its first events;
* ``append_run(id, tenant, batch, status, limits)`` — by the replica generating it, every batch and
  every heartbeat (an empty batch): logs the batch, sets ``status``, stamps the heartbeat; refused
  (nothing changes) once the run has ended — the answer tells the writer it was cancelled or
  declared failed;
* ``settle_run(id, tenant, batch, record, limits, stale=None, if_cancelled=None)`` ends a run that has
  not ended, in one step: logs its last events, sets the status of ``record`` and stores ``record``
  — only if the log ends where ``batch`` begins, and, with ``stale``, only if the heartbeat is at
  least that many seconds old (a replica declaring another's run dead). A run already cancelled
  takes ``if_cancelled`` as its stored response instead (the generating replica's partial output),
  while the response is still stored;
* ``read_run(id, tenant, start)`` → the run's state and its batches from number ``start`` on
  (``None``: the state alone), read together.

Each answers ``None`` for a run that does not exist (never opened, expired, dropped by the bounds,
another tenant's). Ages are measured by the store's own clock (Redis' ``TIME``), so replicas whose
clocks disagree still agree on which run is stale. Runs are bounded like stored responses: by age
(``ttl``), and by count and bytes of logged events (their own budget of ``max_rows`` and
``max_bytes``: the least recently written runs go first, on every write; a run lives ``ttl``
from its last write).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from app.state.responses import StoredResponse

#: statuses of a run that has not ended
UNFINISHED = frozenset({"queued", "in_progress"})
#: statuses a run ends with
ENDED = frozenset({"completed", "incomplete", "failed", "cancelled"})


@dataclass(frozen=True, slots=True)
class Batch:
    """``count`` events, the first numbered ``first``, as the SSE frames ``data`` (empty: a heartbeat)."""

    first: int
    data: bytes = b""
    count: int = 0

    @property
    def end(self) -> int:
        """The number of the event after this batch."""
        return self.first + self.count


@dataclass(frozen=True, slots=True)
class RunLimits:
    """Bytes of events one run's log may hold."""

    events: int = 8 << 20


@dataclass(frozen=True, slots=True)
class RunState:
    """A run as the store holds it: ``status``; ``age``, seconds since its generating replica last
    wrote; ``seq``, the number of the next event (logged or not); ``logged``, how many events its
    log holds (the first ``logged`` of them: past the bound nothing more is kept, ``over``);
    ``size``, their bytes; ``batches``, how many batches they came in."""

    status: str
    age: float
    seq: int
    logged: int = 0
    size: int = 0
    over: bool = False
    batches: int = 0

    @property
    def ended(self) -> bool:
        return self.status not in UNFINISHED


@dataclass(frozen=True, slots=True)
class RunRead:
    """A run's state and the batches read with it (from the number asked for on)."""

    state: RunState
    batches: list[bytes]


class RunStore(Protocol):
    async def open_run(self, record: StoredResponse, tenant: str, batch: Batch, limits: RunLimits) -> None: ...

    async def append_run(self, response_id: str, tenant: str, batch: Batch, status: str,
                         limits: RunLimits) -> RunState | None: ...

    async def settle_run(self, response_id: str, tenant: str, batch: Batch, record: StoredResponse,
                         limits: RunLimits, stale: float | None = None,
                         if_cancelled: StoredResponse | None = None) -> RunState | None: ...

    async def read_run(self, response_id: str, tenant: str, start: int | None) -> RunRead | None: ...


def settle_status(record: StoredResponse) -> str:
    """The status a run ends with when ``record`` settles it."""
    status = str(record.response.get("status"))
    if status not in ENDED:
        raise ValueError(f"a run ends with one of {sorted(ENDED)}, not {status!r}")
    return status


__all__ = ["ENDED", "UNFINISHED", "Batch", "RunLimits", "RunRead", "RunState", "RunStore", "settle_status"]
