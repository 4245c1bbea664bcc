"""What every API face does with a decoded request: plan it, start it, and answer — as a stream of
the face's events, or as one object once the run is complete — with the client's disconnect
watched and the concurrency slot given back exactly once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from app.api.sse import PING, SSEResponse
from app.backends.base import Backend
from app.errors import APIError, BackendError
from app.pipeline.ask import Ask
from app.pipeline.budget import fit_max_tokens
from app.pipeline.choices import Choices, open_choices
from app.pipeline.offload import is_light
from app.pipeline.plan import Plan, plan_request
from app.pipeline.run import Finished, Run, collect
from app.pipeline.stream import ChoicesEncoder, ChoiceStream, Encoder, EventStream
from app.pipeline.validate import check_ask
from app.runtime import Runtime, render_error
from app.templates.chat_template import TemplateError
from app.tenancy import SINGLE, request_tenant
from parsers.events import Event

log = logging.getLogger("toolwire")
T = TypeVar("T")


@dataclass
class RequestScope:
    """What the HTTP layer hands a request: the Starlette request (to watch for disconnects),
    when it started, and how to give back its concurrency slot (exactly once, when the response
    is over — for a stream, when the stream ends)."""

    request: Request | None = None
    started: float = field(default_factory=time.monotonic)
    release: Callable[[], None] = lambda: None
    #: headers the answer carries whatever its shape (``X-Toolwire-Max-Tokens``)
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def tenant(self) -> str:
        """Whose request this is (``app.tenancy``)."""
        return request_tenant(self.request.scope) if self.request is not None else SINGLE


Answer = Callable[[Plan, list[Event], Finished], Response]


def prepare(ask: Ask, runtime: Runtime, backend: Backend, schema_key: str) -> Plan:
    """Check the request and plan it (the CPU-heavy part: ``app.pipeline.offload`` decides where it runs)."""
    check_ask(ask, runtime.settings, schema_key=schema_key)
    try:
        return plan_request(ask, runtime.formats, runtime.require_template(), backend,
                            runtime.settings.max_calls_per_answer)
    except TemplateError as exc:
        raise render_error(exc) from None


async def start(ask: Ask, runtime: Runtime, scope: RequestScope, schema_key: str = "function.parameters") -> Run:
    """Check and plan a one-answer request and start its run (the first backend item has arrived).
    Any failure — limits, template, backend, the client leaving meanwhile — gives the slot back and
    raises an ``APIError``."""
    choices = await start_choices(ask, runtime, scope, schema_key)
    return choices.runs[0]


async def start_choices(ask: Ask, runtime: Runtime, scope: RequestScope,
                        schema_key: str = "function.parameters") -> Choices:
    """``start`` for ``ask.n`` answers: a run per choice, each with its own parsers."""
    try:
        return await until_gone(scope, _start(ask, runtime, scope, schema_key))
    except BaseException:
        scope.release()
        raise


async def _start(ask: Ask, runtime: Runtime, scope: RequestScope, schema_key: str) -> Choices:
    backend = await runtime.ready_backend()
    plan = await runtime.offloader.run(is_light(ask), prepare, ask, runtime, backend, schema_key)
    scope.headers.update(await fit_max_tokens(plan.ask.sampling, plan.prompt, backend, runtime.settings))
    if runtime.settings.log_content:
        log.debug("prompt", extra={"fields": {"prompt": plan.prompt}})
    parsers = [plan.parser() for _ in range(ask.n)]
    try:
        firsts, streams, demux = await open_choices(backend, plan.generation_request(), ask.n,
                                                    runtime.settings.retries)
    except BackendError as exc:
        runtime.metrics.backend_errors.labels(exc.kind).inc()
        raise
    runtime.metrics.ttft.observe(time.monotonic() - scope.started)
    hold = ask.hold_tool_calls if ask.hold_tool_calls is not None else runtime.settings.hold_tool_calls
    runs = [Run(first, stream, plan, parser, runtime.metrics, hold, count_prompt=k == 0)
            for k, (first, stream, parser) in enumerate(zip(firsts, streams, parsers, strict=True))]
    if runtime.settings.log_content:
        for run in runs:
            run.text = []
    return Choices(runs, demux)


async def until_gone(scope: RequestScope, work: Awaitable[T]) -> T:
    """``work``'s result; if the client goes away first, ``work`` is cancelled (which closes an
    upstream request it opened) and ``ClientGone`` is raised."""
    if scope.request is None:
        return await work
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_disconnected(scope.request))
    try:
        done, _ = await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
        if task in done:
            return task.result()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
        log.info("client disconnected before the answer was complete; upstream request closed")
        raise ClientGone()
    finally:
        watcher.cancel()
        if not task.done():
            task.cancel()


class ClientGone(APIError):
    """The client left before anything was sent (status 499: nobody reads the answer)."""

    def __init__(self) -> None:
        super().__init__(499, "client closed the request", code="client_closed_request")


async def stream_response(run: Run, encoder: Encoder, runtime: Runtime, scope: RequestScope,
                          ping: bytes = PING, headers: dict[str, str] | None = None) -> SSEResponse:
    """The run as an SSE stream; what the first backend item holds leaves right behind the head."""
    body = EventStream(run, encoder, runtime.metrics, scope.release)
    try:
        lead = body.lead()
    except BaseException:
        await body.aclose()
        raise
    return SSEResponse(body, lead=lead, ping=ping, headers={**scope.headers, **(headers or {})},
                       on_interrupt=body.interrupted)


async def stream_choices(choices: Choices, encoder: ChoicesEncoder, runtime: Runtime,
                         scope: RequestScope) -> SSEResponse:
    """``stream_response`` for ``n`` answers side by side."""
    body = ChoiceStream(choices, encoder, runtime.metrics, scope.release)
    try:
        lead = body.lead()
    except BaseException:
        await body.aclose()
        raise
    return SSEResponse(body, lead=lead, ping=PING, headers=scope.headers, on_interrupt=body.interrupted)


async def whole_response(run: Run, answer: Answer, scope: RequestScope) -> Response:
    """The answer once the run is complete; the slot is given back however it ends."""

    async def work() -> Response:
        events, finished = await collect(run)
        response = answer(run.plan, events, finished)
        response.headers.update(scope.headers)
        return response

    try:
        return await until_disconnected(scope, work())
    finally:
        await run.aclose()
        scope.release()


ChoicesAnswer = Callable[[Plan, list[tuple[list[Event], Finished]], Finished], Response]


async def whole_choices(choices: Choices, answer: ChoicesAnswer, scope: RequestScope) -> Response:
    """``whole_response`` for ``n`` answers: ``answer`` gets each choice's events and how it ended,
    and the request's totals."""

    async def work() -> Response:
        results = await choices.collect()
        response = answer(choices.plan, results, choices.total())
        response.headers.update(scope.headers)
        return response

    try:
        return await until_disconnected(scope, work())
    finally:
        await choices.aclose()
        scope.release()


async def until_disconnected(scope: RequestScope, work: Awaitable[Response]) -> Response:
    """``work``'s response; if the client goes away first, ``work`` is cancelled (which closes the
    upstream request, so the backend stops generating for nobody) and the answer is a bare 499."""
    try:
        return await until_gone(scope, work)
    except ClientGone:
        return Response(status_code=499)


async def _disconnected(request: Request) -> None:
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


def error_response(exc: APIError) -> JSONResponse:
    return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers or None)
