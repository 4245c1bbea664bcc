"""What every face does with a decoded request, in one call (``respond``): hand its ``Ask`` to the
pipeline (``app.pipeline.generate``: checked, planned, fitted, started) and answer as a stream of
the face's events or as one object once every choice is complete — the client's disconnect
watched throughout — or, for a response generated detached from its request (the Responses API's
``background``), check, plan and fit it here and hand it over (``later``). The legacy completions
face passes the backend's own stream through the same way (``relay``).

An ``Exchange`` is one request as a face sees it: the HTTP request, the part of the process's
services its face uses (``Face.needs``: never the services whole), the served model (``ready``),
the request's concurrency lease, when it started. The slot belongs to the lease
(``app.services.Lease``), held by the route for the whole exchange: a stream's body takes it over
and gives it back however the stream ends (its ``aclose``); anything else gives it back when the
route is done. No face releases a slot itself.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from starlette.requests import Request
from starlette.responses import Response

from app.api.sse import PING, SSEResponse
from app.bodies import Elements
from app.errors import APIError
from app.pipeline.ahead import Ahead
from app.pipeline.ask import Ask
from app.pipeline.choices import Choices
from app.pipeline.generate import Generating, Generation, generate
from app.pipeline.run import Finished
from app.pipeline.stream import AnswerStream, Encoder
from app.served import ServedModel
from app.services import Lease
from app.settings import Settings
from app.tenancy import SINGLE, request_tenant
from app.thinking_signature import ThinkingSigner
from parsers.events import Event

log = logging.getLogger("toolwire")
T = TypeVar("T")
D = TypeVar("D")


class Signs(Protocol):
    """The part of the services that seals and signs reasoning for a tenant."""

    def signer(self, tenant: str) -> ThinkingSigner: ...


@dataclass
class Exchange(Generic[D]):
    """One request as a face sees it (see the module docstring); ``services`` is what its face uses."""

    request: Request | None
    services: D
    ready: Callable[[], Awaitable[ServedModel]]
    lease: Lease | None = None
    started: float = field(default_factory=time.monotonic)
    #: headers the answer carries whatever its shape (``X-Toolwire-Max-Tokens``)
    headers: dict[str, str] = field(default_factory=dict)
    #: the body's growing list as the prefix service read it (``app.bodies``; ``Route.grows``)
    elements: Elements | None = None

    @property
    def settings(self) -> Settings:
        settings: Settings = self.services.settings  # type: ignore[attr-defined]
        return settings

    @property
    def tenant(self) -> str:
        """Whose request this is (``app.tenancy``)."""
        return request_tenant(self.request.scope) if self.request is not None else SINGLE

    @property
    def signer(self) -> ThinkingSigner:
        """Seals and signatures bound to this request's tenant."""
        services: Signs = self.services  # type: ignore[assignment]
        return services.signer(self.tenant)


#: each choice's events and how it ended, the request's totals, the choices → the face's response
Build = Callable[[list[tuple[list[Event], Finished]], Finished, Choices], Awaitable[Response]]


async def respond(ex: Exchange[Any], ask: Ask, *, stream: bool, encoder: Callable[[Choices], Encoder] | None = None,
                  early: Callable[[], Encoder] | None = None, build: Build | None = None,
                  later: Callable[[Generation], Awaitable[Response]] | None = None,
                  schema_key: str = "function.parameters", ping: bytes = PING,
                  headers: dict[str, str] | None = None) -> Response:
    """The face's answer to ``ask``: generated (``app.pipeline.generate``) and streamed through the
    face's ``encoder`` (made from the started ``Choices``, or ``early``: while the backend works on
    the first token), or built whole by ``build`` — or, with ``later``, checked, planned and fitted
    and handed to ``later`` to be generated detached from the request (its answer: ``later``'s).
    Any failure before the first byte — limits, template, backend, the client leaving meanwhile —
    raises an ``APIError``."""
    services: Generating = ex.services
    writer = Ahead(early) if stream and early is not None and later is None else None
    try:
        started = await until_gone(ex, _generate(ask, ex, services, schema_key, later is None))
    except BaseException:
        if writer is not None:
            writer.drop()
        raise
    if isinstance(started, Generation):
        assert later is not None
        return await later(started)
    choices = started
    ex.headers.update(choices.headers)
    if stream:
        made = writer.get() if writer is not None else encoder(choices) if encoder is not None else None
        assert made is not None, "a stream needs an encoder"
        return await _stream(AnswerStream(choices, made, services.metrics, _release(ex)), ex, ping, headers)
    assert build is not None, "a whole answer needs a builder"
    return await _whole(choices, build, ex)


async def _generate(ask: Ask, ex: Exchange[Any], services: Generating, schema_key: str,
                    launch: bool) -> Choices | Generation:
    """``ask`` started, or (``launch`` false) checked, planned and fitted to be started later."""
    return await generate(ask, await ex.ready(), services, schema_key, ex.started, launch=launch)


class Body(Protocol):
    """A streamed answer's body: what it leads with, its bytes, its end however it ends (which gives
    the request's slot back), and its closing bytes when the server cuts it (shutdown)."""

    def lead(self) -> bytes: ...

    def __aiter__(self) -> AsyncIterator[bytes]: ...

    async def aclose(self) -> None: ...

    def interrupted(self) -> bytes: ...


async def _stream(body: Body, ex: Exchange[Any], ping: bytes = PING,
                  headers: dict[str, str] | None = None) -> SSEResponse:
    """``body`` as an SSE stream; what it leads with leaves right behind the head. The body owns the
    request's slot from here on."""
    try:
        return SSEResponse(body, lead=body.lead(), ping=ping, headers={**ex.headers, **(headers or {})},
                           on_interrupt=body.interrupted)
    except BaseException:
        await body.aclose()
        raise


def _release(ex: Exchange[Any]) -> Callable[[], None]:
    """The request's slot, handed over to the body that now owns it."""
    return ex.lease.hand_over() if ex.lease is not None else _nothing


async def relay(ex: Exchange[Any], make: Callable[[Callable[[], None]], Body],
                headers: dict[str, str] | None = None) -> SSEResponse:
    """A stream passed through as it comes (``make`` builds its body around the slot's release):
    the same owner of the slot as every other stream."""
    return await _stream(make(_release(ex)), ex, headers=headers)


async def _whole(choices: Choices, build: Build, ex: Exchange[Any]) -> Response:
    """The answer once every choice is complete (a bare 499 if the client left first: the backend
    stops generating for nobody)."""
    try:
        results = await until_gone(ex, choices.collect())
    except ClientGone:
        return Response(status_code=499)
    finally:
        await choices.aclose()
    response = await build(results, choices.total(), choices)
    response.headers.update(ex.headers)
    return response


def _nothing() -> None:
    pass


async def until_gone(ex: Exchange[Any], work: Awaitable[T]) -> T:
    """``work``'s result; if the client goes away first, ``work`` is cancelled (which closes an
    upstream request it opened) and ``ClientGone`` is raised. ``work`` runs in the caller's task (a
    watcher task cancels it when the client leaves): no task of its own to start and wait for. The
    watcher is started ``Ahead``, once ``work`` first waits (for the backend): a client
    cannot be seen leaving before then, and what ``work`` does up to its first wait (check, render,
    ask the backend) does not wait for a task to be made."""
    request = ex.request
    if request is None:
        return await work
    current = asyncio.current_task()
    assert current is not None
    gone = False

    def left(watcher: asyncio.Future[None]) -> None:
        nonlocal gone
        if not watcher.cancelled() and watcher.exception() is None:
            gone = True
            current.cancel()

    def watch() -> asyncio.Future[None]:
        watcher = asyncio.ensure_future(_disconnected(request))
        watcher.add_done_callback(left)
        return watcher

    watching = Ahead(watch)  # started when ``work`` first waits; never, if it does not
    try:
        return await work
    except asyncio.CancelledError:
        if gone and current.uncancel() == 0:  # cancelled by the watcher alone, not by the server
            log.info("client disconnected before the answer was complete; upstream request closed")
            raise ClientGone() from None
        raise
    finally:
        watching.drop()
        for watcher in watching.made:
            watcher.remove_done_callback(left)
            watcher.cancel()


class ClientGone(APIError):
    """The client left before anything was sent (status 499: nobody reads the answer)."""

    def __init__(self) -> None:
        super().__init__(499, "client closed the request", code="client_closed_request")


async def _disconnected(request: Request) -> None:
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


__all__ = ["Body", "Build", "ClientGone", "Exchange", "relay", "respond", "until_gone"]
