"""What every face does with a decoded request — one path for one answer or ``n``: check and plan it,
start it (``start``), and answer as a stream of the face's events (``stream``) or as one object once
every choice is complete (``whole``), with the client's disconnect watched throughout.

The request's concurrency slot belongs to its lease (``app.services.Lease``), held by the route for
the whole exchange: a stream takes it over and gives it back when the stream ends; anything else
gives it back when the route is done. No face releases a slot itself.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from starlette.requests import Request
from starlette.responses import Response

from app.api.sse import PING, SSEResponse
from app.errors import APIError, BackendError
from app.pipeline.ask import Ask
from app.pipeline.budget import fit_max_tokens
from app.pipeline.choices import Choices, open_choices
from app.pipeline.literal import encode_prompt
from app.pipeline.offload import is_light
from app.pipeline.plan import Plan, plan_request
from app.pipeline.run import Finished, Run
from app.pipeline.stream import AnswerStream, Encoder
from app.pipeline.validate import check_ask
from app.runtime import render_error
from app.served import ServedModel
from app.services import Lease, Services
from app.settings import Settings
from app.templates.chat_template import TemplateError
from app.tenancy import SINGLE, request_tenant
from app.thinking_signature import ThinkingSigner
from parsers.events import Event

log = logging.getLogger("toolwire")
T = TypeVar("T")


@dataclass
class Exchange:
    """One request as a face sees it: the HTTP request (to watch for disconnects; whose tenant it
    is), the process's services, the served model (probed on first need: ``ready()``), the request's
    concurrency lease, and when it started."""

    request: Request | None
    services: Services
    ready: Callable[[], Awaitable[ServedModel]]
    lease: Lease | None = None
    started: float = field(default_factory=time.monotonic)
    #: headers the answer carries whatever its shape (``X-Toolwire-Max-Tokens``)
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def settings(self) -> Settings:
        return self.services.settings

    @property
    def tenant(self) -> str:
        """Whose request this is (``app.tenancy``)."""
        return request_tenant(self.request.scope) if self.request is not None else SINGLE

    @property
    def signer(self) -> ThinkingSigner:
        """Seals and signatures bound to this request's tenant."""
        return self.services.signer(self.tenant)


#: each choice's events and how it ended, and the request's totals → the face's response
Build = Callable[[list[tuple[list[Event], Finished]], Finished], Awaitable[Response]]


def prepare(ask: Ask, settings: Settings, model: ServedModel, schema_key: str) -> Plan:
    """Check the request and plan it (the CPU-heavy part: ``app.pipeline.offload`` decides where it runs —
    perhaps another process, on a copy of ``ask``: this changes nothing in it)."""
    check_ask(ask, settings, schema_key=schema_key)
    try:
        return plan_request(ask, model.formats, model.require_template(), model.backend,
                            settings.max_calls_per_answer, model.control)
    except TemplateError as exc:
        raise render_error(exc) from None


async def plan(ask: Ask, ex: Exchange, schema_key: str = "function.parameters") -> tuple[Plan, ServedModel]:
    """The request checked and planned, and the model it is for."""
    model = await ex.ready()
    light = is_light(ask)
    planned = await ex.services.offloader.run(light, prepare, ask, ex.settings, model, schema_key)
    ask.planned_on_loop = light
    return planned, model


async def start(ask: Ask, ex: Exchange, schema_key: str = "function.parameters") -> Choices:
    """Check and plan the request and start its ``ask.n`` answers (each choice's first backend item
    has arrived). Any failure — limits, template, backend, the client leaving meanwhile — raises an
    ``APIError``."""
    return await until_gone(ex, _start(ask, ex, schema_key))


async def _start(ask: Ask, ex: Exchange, schema_key: str) -> Choices:
    planned, model = await plan(ask, ex, schema_key)
    await fit(ask, planned, model, ex)
    return await launch(ask, planned, model, ex)


async def fit(ask: Ask, planned: Plan, model: ServedModel, ex: Exchange) -> None:
    """Fit the request's ``max_tokens`` to the cap and the context (``app.pipeline.budget``; the
    headers saying so go on the exchange)."""
    ex.headers.update(await fit_max_tokens(ask.sampling, planned, model, ex.settings))


async def launch(ask: Ask, planned: Plan, model: ServedModel, ex: Exchange) -> Choices:
    """Start the ``ask.n`` answers of a request already planned and fitted (each choice's first
    backend item has arrived); a ``BackendError`` when the backend refuses or cannot be reached."""
    settings, metrics = ex.settings, ex.services.metrics
    if planned.spans:  # client control text kept text: the prompt in tokens (app.pipeline.literal); rare
        await encode_prompt(planned, model)
    if settings.log_content:
        log.debug("prompt", extra={"fields": {"prompt": planned.prompt}})
    # the backend is asked first; the parsers are built while it works on the first token
    built = Ahead(lambda: [planned.parser() for _ in range(ask.n)])
    try:
        firsts, streams, demux = await open_choices(model.backend, planned.generation_request(), ask.n,
                                                    settings.retries)
    except BaseException as exc:
        built.drop()
        if isinstance(exc, BackendError):
            metrics.backend_errors.labels(exc.kind).inc()
        raise
    try:
        parsers = built.get()
    except BaseException:
        for stream in streams:
            await stream.aclose()
        if demux is not None:
            await demux.aclose()
        raise
    metrics.ttft.observe(time.monotonic() - ex.started)
    hold = ask.hold_tool_calls if ask.hold_tool_calls is not None else settings.hold_tool_calls
    runs = [Run(first, stream, planned, parser, metrics, hold, count_prompt=k == 0)
            for k, (first, stream, parser) in enumerate(zip(firsts, streams, parsers, strict=True))]
    if settings.log_content:
        for run in runs:
            run.text = []
    return Choices(runs, demux)


class Ahead(Generic[T]):
    """What an answer needs only once the backend's first token is in (its parsers, a face's
    encoder), made by a loop callback: it runs when the request's task first waits — for the
    backend, once the request is sent — so it is not on the way to asking the backend. ``get()``
    gives it (made now if the callback has not run; an error it raised, raised here)."""

    def __init__(self, make: Callable[[], T]) -> None:
        self.make = make
        self.made: list[T] = []
        self.failure: BaseException | None = None
        self.pending = asyncio.get_running_loop().call_soon(self._run)

    def _run(self) -> None:
        if self.made or self.failure is not None:
            return
        try:
            self.made.append(self.make())
        except Exception as exc:  # noqa: BLE001 - raised again in the request's task (get())
            self.failure = exc

    def get(self) -> T:
        self.pending.cancel()
        self._run()
        if self.failure is not None:
            raise self.failure
        return self.made[0]

    def drop(self) -> None:
        """Not needed after all (the request failed): the callback does not run."""
        self.pending.cancel()


async def stream(choices: Choices, encoder: Encoder, ex: Exchange, ping: bytes = PING,
                 headers: dict[str, str] | None = None) -> SSEResponse:
    """The answers as an SSE stream; what the first backend items hold leaves right behind the head.
    The stream owns the request's slot from here on."""
    release = ex.lease.hand_over() if ex.lease is not None else _nothing
    body = AnswerStream(choices, encoder, ex.services.metrics, release)
    try:
        return SSEResponse(body, lead=body.lead(), ping=ping, headers={**ex.headers, **(headers or {})},
                           on_interrupt=body.interrupted)
    except BaseException:
        await body.aclose()
        raise


async def whole(choices: Choices, build: Build, ex: Exchange) -> Response:
    """The answer once every choice is complete (a bare 499 if the client left first: the backend
    stops generating for nobody)."""
    try:
        results = await until_gone(ex, choices.collect())
    except ClientGone:
        return Response(status_code=499)
    finally:
        await choices.aclose()
    response = await build(results, choices.total())
    response.headers.update(ex.headers)
    return response


def _nothing() -> None:
    pass


async def until_gone(ex: Exchange, work: Awaitable[T]) -> T:
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


__all__ = ["Build", "ClientGone", "Exchange", "Run", "fit", "launch", "plan", "prepare", "start", "stream", "until_gone",
           "whole"]
