"""Prometheus metrics (``/metrics``). One registry per app instance, so several apps in one process
(tests) never collide.

With ``--workers N`` the metrics are the server's, not one worker's: ``toolwire serve`` gives the
workers a shared folder (``PROMETHEUS_MULTIPROC_DIR``, ``shared_folder``) before they start, each
worker's values live in files there (prometheus_client's multiprocess mode, chosen when the library
is imported), and every worker's ``/metrics`` adds up all of them — counters and histograms summed,
gauges summed over the workers alive. A scrape sees the same totals whichever worker answers, and
a worker replaced after a crash keeps its counts in the sums (they never go down); its gauges are
dropped by the next worker that starts.

| metric | type | labels |
|---|---|---|
| toolwire_requests_total | counter | endpoint, status |
| toolwire_request_duration_seconds | histogram | endpoint |
| toolwire_time_to_first_token_seconds | histogram | — |
| toolwire_tokens_total | counter | direction (prompt / completion) |
| toolwire_active_streams | gauge | — |
| toolwire_backend_errors_total | counter | kind |
| toolwire_background_responses | gauge | — |
| toolwire_rejected_total | counter | reason (concurrency / auth / background) |
| toolwire_parse_events_total | counter | detector, event (tool_call / unknown_tool / malformed_passthrough / unfinished_call) |
| toolwire_prefix_lookups_total | counter | outcome (``app.prefix.OUTCOMES``: found / kept / first_sight / short / chain_found / chain_missed / items_found / items_missed) |
| toolwire_prefix_bytes | gauge | — (what the prefix service holds, summed over the workers: against ``--prefix-cache-bytes``) |
"""

from __future__ import annotations

import contextlib
import glob
import os
import re
import tempfile

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, multiprocess, values
from prometheus_client.exposition import CONTENT_TYPE_LATEST

#: where prometheus_client's multiprocess mode keeps each process's values
SHARED_ENV = "PROMETHEUS_MULTIPROC_DIR"

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
TTFT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


class Metrics:
    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter("toolwire_requests", "HTTP requests by endpoint and status",
                                ("endpoint", "status"), registry=r)
        self.latency = Histogram("toolwire_request_duration_seconds", "Request duration (to the last byte)",
                                 ("endpoint",), buckets=LATENCY_BUCKETS, registry=r)
        self.ttft = Histogram("toolwire_time_to_first_token_seconds", "Time to the first generated text",
                              buckets=TTFT_BUCKETS, registry=r)
        self.tokens = Counter("toolwire_tokens", "Tokens reported by the backend", ("direction",), registry=r)
        self.active_streams = Gauge("toolwire_active_streams", "Streaming responses in flight", registry=r,
                                    multiprocess_mode="livesum")
        self.background = Gauge("toolwire_background_responses", "Background responses generating",
                                registry=r, multiprocess_mode="livesum")
        self.backend_errors = Counter("toolwire_backend_errors", "Backend failures by kind", ("kind",), registry=r)
        self.rejected = Counter("toolwire_rejected", "Requests refused before work started", ("reason",),
                                registry=r)
        self.parse_events = Counter("toolwire_parse_events", "Parser outcomes by detector", ("detector", "event"),
                                    registry=r)
        self.prefix_lookups = Counter("toolwire_prefix_lookups", "Prefix service lookups by outcome", ("outcome",),
                                      registry=r)
        self.prefix_bytes = Gauge("toolwire_prefix_bytes", "Bytes the prefix service holds", registry=r,
                                  multiprocess_mode="livesum")

        self.shared = shared()
        if self.shared is not None:
            forget_dead_workers(self.shared)

    def render(self) -> bytes:
        """The exposition: this app's registry, or with workers every worker's values added up."""
        if self.shared is None:
            return generate_latest(self.registry)
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry, self.shared)  # type: ignore[no-untyped-call]
        return generate_latest(registry)


def shared() -> str | None:
    """The shared folder, when this process records its values there (the variable was set before
    prometheus_client was imported, as ``toolwire serve`` does for its workers)."""
    folder = os.environ.get(SHARED_ENV)
    return folder if folder and values.ValueClass is not values.MutexValue else None


def shared_folder() -> tuple[str, bool]:
    """Set up ``PROMETHEUS_MULTIPROC_DIR`` for worker processes about to start: the operator's, or
    a fresh temporary folder (``True``: ours, to remove when the server stops)."""
    given = os.environ.get(SHARED_ENV)
    if given:
        return given, False
    folder = tempfile.mkdtemp(prefix="toolwire-metrics-")
    os.environ[SHARED_ENV] = folder
    return folder, True


def forget_dead_workers(folder: str) -> None:
    """Drop the live gauges of processes that are gone (a worker that crashed and was replaced)."""
    for path in glob.glob(os.path.join(folder, "gauge_live*_*.db")):
        found = re.search(r"_(\d+)\.db$", path)
        if found is None:
            continue
        pid = int(found.group(1))
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            with contextlib.suppress(OSError):
                multiprocess.mark_process_dead(pid, folder)  # type: ignore[no-untyped-call]
        except PermissionError:  # alive, another user's
            pass
