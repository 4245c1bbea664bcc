"""Timing one streamed parse through toolwire's public parser API (standard library only: this
module also runs inside the SGLang venv).

``run_toolwire(case)`` builds the parser chain with ``parsers.build_response_parser``, feeds the
case's chunks one ``feed`` call each, then ``end()``; it returns the total time (parser
construction excluded), optionally the time of every call, and whether the parse was right.
"""

from __future__ import annotations

import gc
import time
from dataclasses import dataclass
from typing import Any

from bench.cases import Case, toolwire_check, toolwire_parser


@dataclass
class Run:
    seconds: float
    chunk_seconds: list[float] | None
    error: str | None  # None: the parse was right


def run_toolwire(case: Case, per_chunk: bool = False, check: bool = True) -> Run:
    gc.collect()
    parser = toolwire_parser(case)
    events: list[Any] = []
    keep = events.extend if check else (lambda _events: None)
    clock = time.perf_counter
    if per_chunk:
        times: list[float] = []
        add = times.append
        for chunk in case.chunks:
            t0 = clock()
            out = parser.feed(chunk)
            add(clock() - t0)
            keep(out)
        t0 = clock()
        out = parser.end()
        add(clock() - t0)
        keep(out)
        total = sum(times)
        chunk_times: list[float] | None = times
    else:
        t0 = clock()
        for chunk in case.chunks:
            keep(parser.feed(chunk))
        keep(parser.end())
        total = clock() - t0
        chunk_times = None
    error = toolwire_check(case, events) if check else None
    return Run(total, chunk_times, error)
