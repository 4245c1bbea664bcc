"""Run the toolwire app on a real loopback port, in a background thread, for HTTP tests."""

from __future__ import annotations

import asyncio
import concurrent.futures
import socket
import tempfile
import threading
import time
from collections.abc import Coroutine
from typing import Any, TypeVar

import uvicorn

from app.api.server import create_app, uvicorn_options
from app.settings import Settings

T = TypeVar("T")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ProxyServer:
    def __init__(self, **settings: Any) -> None:
        settings.setdefault("port", free_port())
        settings.setdefault("retries", 0)
        if "state_dir" not in settings:  # the response store of this proxy alone, gone with it
            self._state = tempfile.TemporaryDirectory(prefix="toolwire-state-")
            settings["state_dir"] = self._state.name
        self.settings = Settings(**settings)
        self.app = create_app(self.settings)
        options = {**uvicorn_options(self.settings), "timeout_graceful_shutdown": 2}
        config = uvicorn.Config(self.app, host="127.0.0.1", port=self.settings.port, log_level="warning",
                                lifespan="on", **options)
        self.server = uvicorn.Server(config)
        self.loop: asyncio.AbstractEventLoop | None = None  # the server's loop, once it runs
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        self.loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_until_complete(self.server.serve())
        finally:
            self.loop.close()

    def call(self, work: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Run a coroutine on the server's loop (its services live there), from the test's thread."""
        assert self.loop is not None
        return asyncio.run_coroutine_threadsafe(work, self.loop)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.settings.port}"

    @property
    def runtime(self) -> Any:
        return self.app.state.runtime

    def start(self) -> ProxyServer:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("proxy did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)
