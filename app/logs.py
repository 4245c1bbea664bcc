"""Structured JSON logs on stderr, one object per line, with the request id when there is one."""

from __future__ import annotations

import contextvars
import json
import logging
import sys
import time

request_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("request_id", default=None)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        rid = request_id.get()
        if rid:
            entry["request_id"] = rid
        extra = getattr(record, "fields", None)
        if isinstance(extra, dict):
            entry.update(extra)
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def configure(level: str = "info") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error"):
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True
    # the edge logs each request itself; uvicorn's own access lines go nowhere — and with no handler
    # in sight uvicorn does not even format them. Here, not as uvicorn's ``access_log`` option: a
    # worker process (``--workers``) starts with fresh loggers and runs only this.
    uvicorn_access = logging.getLogger("uvicorn.access")
    uvicorn_access.handlers[:] = []
    uvicorn_access.propagate = False
    uvicorn_access.setLevel("WARNING")
    logging.getLogger("httpx").setLevel("WARNING")
