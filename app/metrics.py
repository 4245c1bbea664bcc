"""Prometheus metrics (``/metrics``). One registry per app instance, so several apps (tests, or
workers — each worker process exposes its own) never collide.

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
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

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
        self.active_streams = Gauge("toolwire_active_streams", "Streaming responses in flight", registry=r)
        self.background = Gauge("toolwire_background_responses", "Background responses generating in this process",
                                registry=r)
        self.backend_errors = Counter("toolwire_backend_errors", "Backend failures by kind", ("kind",), registry=r)
        self.rejected = Counter("toolwire_rejected", "Requests refused before work started", ("reason",),
                                registry=r)
        self.parse_events = Counter("toolwire_parse_events", "Parser outcomes by detector", ("detector", "event"),
                                    registry=r)

    def render(self) -> bytes:
        return generate_latest(self.registry)
