"""The process's lifecycle: its services (``app.services``) and, once the backend has answered, the
model it serves (``app.served``).

The backend may come up after toolwire (a sidecar starting beside its model server), so it is
probed at start-up (briefly) and again on demand — by ``/health``, readiness and requests — until it
answers. ``draining`` is set when the process was told to stop: readiness then says no, so a load
balancer stops sending new requests while the ones under way finish.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
import threading
from types import FrameType
from typing import Any

import httpx

from app.errors import APIError
from app.served import (
    NoTemplateError,
    ParserConfigError,
    ServedModel,
    probe,
    validate_parser_names,
    validate_template_source,
)
from app.services import Services
from app.settings import Settings
from app.templates.chat_template import ChatTemplate

log = logging.getLogger("toolwire")

__all__ = ["NoTemplateError", "ParserConfigError", "Runtime", "validate_parser_names", "validate_template_source"]

SHARED_STORE_WITHOUT_SECRET = (
    "!!! --response-store is shared (Redis) but no --thinking-secret is set: this replica seals reasoning "
    "and signs thinking blocks with a key of its own, which no other replica can verify — a conversation "
    "whose next turn lands elsewhere loses its reasoning. Give every replica the same --thinking-secret.")


class Runtime:
    """See the module docstring."""

    def __init__(self, settings: Settings) -> None:
        validate_parser_names(settings)
        validate_template_source(settings)
        self.settings = settings
        self.services = Services(settings)
        self.model: ServedModel | None = None
        self.draining = False
        self._template: ChatTemplate | None = None  # --chat-template, loaded at start
        self._lock = asyncio.Lock()

    async def start(self) -> None:
        await self.services.start()
        self._watch_for_termination()
        if self.settings.response_store and self.settings.thinking_secret is None:
            log.warning(SHARED_STORE_WITHOUT_SECRET)
        if self.settings.chat_template is not None:
            self._template = ChatTemplate.load(self.settings.chat_template)
        try:
            await asyncio.wait_for(self.ready(), timeout=max(5.0, self.settings.connect_timeout))
        except (TimeoutError, APIError) as exc:
            log.warning("backend not ready at start-up (%s); will retry on demand", getattr(exc, "message", exc))
        _freeze_start_up()

    async def stop(self) -> None:
        await self.services.stop()

    def _watch_for_termination(self) -> None:
        """On SIGTERM: readiness says ``draining`` at once, and the server's own shutdown (uvicorn's
        handler, which stops accepting and drains in-flight streams) follows ``--drain-seconds``
        later, so a load balancer stops sending here first. A second SIGTERM, or SIGINT, stops at
        once. (Signals reach the main thread only: a server run in another thread does not drain.)"""
        if threading.current_thread() is not threading.main_thread() or self.settings.drain_seconds <= 0:
            return
        loop = asyncio.get_running_loop()
        server_handler = signal.getsignal(signal.SIGTERM)
        if not callable(server_handler):
            return
        delay = self.settings.drain_seconds

        def on_term(sig: int, frame: FrameType | None) -> None:
            if self.draining:
                server_handler(sig, frame)
                return
            self.draining = True
            log.info("SIGTERM: draining (readiness is 503) for %.1f s, then shutting down", delay)
            loop.call_soon_threadsafe(loop.call_later, delay, server_handler, sig, frame)

        signal.signal(signal.SIGTERM, on_term)

    async def ready(self) -> ServedModel:
        """The served model, probing the backend first if that has not succeeded yet (503 while it
        does not answer)."""
        if self.model is not None:
            return self.model
        async with self._lock:
            if self.model is None:
                assert self.services.client is not None
                try:
                    self.model = await probe(self.settings, self.services.client, self.services.streaming,
                                             self._template)
                except httpx.HTTPError as exc:
                    raise APIError(503, f"backend not ready: {type(exc).__name__}", "server_error",
                                   code="backend_unreachable") from exc
                self.services.prefix.serving(self.model)  # what it kept was for the model served before
                self.services.pool.warm(self.model)  # the prepare workers start now, given the model
            return self.model

    def describe(self) -> dict[str, Any]:
        if self.model is None:
            return {"backend": self.settings.backend, "backend_type": None, "model": self.settings.model,
                    "reasoning_parser": None, "tool_call_parser": None, "template": None}
        return self.model.describe(self.settings.backend)


def _freeze_start_up() -> None:
    """Put what start-up made (modules, the app, the model) out of the garbage collector's sight:
    it lives as long as the process, and a full collection would otherwise walk all of it — 100 to
    300 ms on the event loop, set off by any large request's allocations. Only in a server's own
    process (main thread): a server run in a thread of another program (the tests) leaves that
    program's collector alone."""
    if threading.current_thread() is threading.main_thread():
        gc.freeze()
