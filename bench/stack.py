"""The app's own per-request cost, in process: the ASGI app called with a request whose body is not
JSON on the chat route (a 400 from the endpoint: every layer down to it and back, no backend), and
``GET /livez``. Best of repeats, warm, CPU µs per request (this thread: steadier than wall time on a shared machine). Run it from two checkouts to compare them
(``python -m bench.stack``); the edge's layers are what differs between app shapes.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from app.api.server import create_app
from app.settings import Settings


async def _one(app: Any, method: str, path: str, body: bytes) -> int:
    sent: list[dict[str, Any]] = []
    messages = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive() -> dict[str, Any]:
        return messages.pop() if messages else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method, "path": path,
             "raw_path": path.encode(), "root_path": "", "scheme": "http", "query_string": b"",
             "headers": [(b"host", b"x"), (b"content-type", b"application/json"),
                         (b"content-length", str(len(body)).encode())],
             "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 2), "state": {}}
    await app(scope, receive, send)
    return int(sent[0]["status"])


async def _main() -> None:
    logging.disable(logging.CRITICAL)
    app = create_app(Settings(backend="http://127.0.0.1:9"))
    for label, args in (("POST chat, 400 from the endpoint", ("POST", "/v1/chat/completions", b"{nope")),
                        ("GET /livez", ("GET", "/livez", b""))):
        assert await _one(app, *args) in (200, 400)
        best = float("inf")
        for _ in range(7):
            n = 3000
            started = time.thread_time()
            for _ in range(n):
                await _one(app, *args)
            best = min(best, (time.thread_time() - started) / n)
        print(f"{label:36} {best * 1e6:7.1f} µs")


if __name__ == "__main__":
    asyncio.run(_main())
