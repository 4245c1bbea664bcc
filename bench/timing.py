"""Timing one streamed parse through toolwire's public parser API (standard library only: this
module also runs inside the SGLang venv).

``run_toolwire(case)`` builds the parser chain with ``parsers.build_response_parser``, feeds the
case's chunks one ``feed`` call each, then ``end()``; it returns the total time (parser
construction excluded), optionally the time of every call, and whether the parse was right.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bench.cases import Case, Collected, toolwire_check, toolwire_parser


@dataclass
class Run:
    seconds: float
    chunk_seconds: list[float] | None
    error: str | None  # None: the parse was right


def run_toolwire(case: Case, per_chunk: bool = False, check: bool = True,
                 clock: Callable[[], float] = time.perf_counter) -> Run:
    """One streamed parse of ``case``. With ``per_chunk`` every ``feed`` is timed on its own and
    its events are taken in by the check (``Collected``) between the timed calls, as a consumer
    does; otherwise the whole loop is timed, keeping the events in a list, as SGLang's side of
    the comparison keeps its items. ``clock``: wall time by default; the comparison with SGLang
    passes ``time.thread_time`` (CPU time of this thread) for both sides."""
    gc.collect()
    parser = toolwire_parser(case)
    got = Collected()
    if per_chunk:
        times: list[float] = []
        add = times.append
        take = got.add if check else (lambda _events: None)
        for chunk in case.chunks:
            t0 = clock()
            out = parser.feed(chunk)
            add(clock() - t0)
            take(out)
        t0 = clock()
        out = parser.end()
        add(clock() - t0)
        take(out)
        total = sum(times)
        chunk_times: list[float] | None = times
    else:
        events: list[Any] = []
        keep = events.extend if check else (lambda _events: None)
        t0 = clock()
        for chunk in case.chunks:
            keep(parser.feed(chunk))
        keep(parser.end())
        total = clock() - t0
        chunk_times = None
        got.add(events)
    error = toolwire_check(case, got) if check else None
    return Run(total, chunk_times, error)
