"""``POST /v1/completions``: the legacy completions API, passed through to the backend's own.

The body goes upstream as the client sent it (the backend's model name set), but only after the
same checks every face gets: a JSON object of the right shape, ``max_tokens`` within
``--max-tokens-cap`` (``app.pipeline.budget``), at most 8 choices; the concurrency slot is held for
the whole answer, and a client that leaves — before the first byte or during the stream — closes
the upstream request at once.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

from starlette.responses import Response

from app.api.answer import Exchange, relay, until_gone
from app.api.completions.protocol import CompletionRequest
from app.api.protocol import validated
from app.backends.streamhttp import StreamError
from app.errors import BackendError, bad_request
from app.pipeline.budget import Clamp, announce, cap_max_tokens
from app.services import Settled
from app.settings import Settings

BROKE = b'data: {"error": {"message": "backend stream broke", "type": "server_error"}}\n\n'
SHUTTING_DOWN = b'data: {"error": {"message": "the server is shutting down", "type": "server_error"}}\n\n'


def check(body: Any, settings: Settings) -> tuple[CompletionRequest, Clamp | None]:
    if not isinstance(body, dict):
        raise bad_request("request body must be a JSON object")
    request = validated(CompletionRequest, body)
    granted, clamp = cap_max_tokens(request.max_tokens, settings)
    if granted != request.max_tokens:
        body["max_tokens"] = granted  # within the cap (the backend's default may be unbounded)
    return request, clamp


class Relay:
    """The backend's own stream, passed through as it comes (an answer ``Body``): closed upstream,
    and the request's slot given back, however the stream ends — iterated or not."""

    def __init__(self, upstream: Any, release: Callable[[], None]) -> None:
        self.upstream, self.release = upstream, release
        self.closed = False

    def lead(self) -> bytes:
        return b""

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self.upstream.aiter_bytes():
                yield chunk
        except StreamError:
            yield BROKE
        finally:
            await self.aclose()

    async def aclose(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            await self.upstream.aclose()
        finally:
            self.release()

    def interrupted(self) -> bytes:
        return SHUTTING_DOWN


async def completions(body: Any, ex: Exchange[Settled]) -> Response:
    request, clamp = check(body, ex.settings)

    async def open_upstream() -> Any:
        backend = (await ex.ready()).backend
        if backend.model:
            body["model"] = backend.model
        return await backend.open_stream("/v1/completions", body)

    upstream = await until_gone(ex, open_upstream())
    if not request.stream:
        async def read() -> bytes:
            try:
                raw: bytes = await upstream.aread()
                return raw
            except StreamError as exc:
                raise BackendError(502, f"backend stream broke: {exc}", kind="dropped") from exc

        try:
            raw = await until_gone(ex, read())
        finally:
            await upstream.aclose()
        return Response(raw, media_type="application/json", headers=announce(clamp))
    return await relay(ex, lambda release: Relay(upstream, release), announce(clamp))
