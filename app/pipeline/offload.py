"""CPU-heavy request work (tool-schema checks, chat-template rendering) kept off the event loop —
in other processes, so the loop never waits for it — and bounded in time.

A request is *light* when it is small (few turns, little text, few and small tools): its checks and
render run inline, since shipping them elsewhere would cost more than they do. A heavy one is
prepared by one of a few worker processes (``app.pipeline.workers``; ``--prepare-workers``, 2 by
default). Python threads would share the interpreter lock with the loop, so every other request
and stream would wait on the work in slices; a process shares nothing with it. The request is
pickled there and the plan comes back without it: for an agent's 80-message request that costs
the loop under 1 ms of CPU, against ~4 ms to prepare it inline (``make bench``, section
``offload``). The served model and the settings reach each worker once.

Heavy requests queue for a free worker, first come first served, for at most ``--max-queue-ms``:
past that the request is answered 503 ``server_busy`` with ``Retry-After`` (the bound is in time,
not in count: a burst of agent requests waits its turn instead of being refused). A job may then
use at most ``--max-render-ms`` of CPU time (a busy machine does not count against it), and at
most ``WALL_FACTOR`` times that (and a little) in wall time: past either the request is answered
400 and its worker is killed and replaced, so abandoned work never piles up. A job whose client
has left runs to its end (or those bounds) in the background, and its worker is then free again.

``Turns`` keeps a burst of large requests from taking the loop all at once (see there).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import pickle
from collections.abc import Callable
from typing import Any, TypeVar

import httpx
import orjson

from app.backends.streamhttp import StreamingClient
from app.errors import APIError, bad_request
from app.parser_choice import ParserChoice
from app.pipeline.ask import Ask
from app.pipeline.workers import OverBudget, Worker, WorkerLost
from app.served import ServedModel, choose_parsers
from app.settings import Settings
from app.templates.chat_template import ChatTemplate
from app.templates.resume import RenderCache

log = logging.getLogger("toolwire")
T = TypeVar("T")

#: beyond any of these a request is heavy (each bounds what inline work can cost)
LIGHT_TURNS = 64
LIGHT_CHARS = 32_768  # message text, call arguments and tool definitions (their JSON)
LIGHT_TOOLS = 32
#: conversation text (known turns included) past which a request is heavy however much of it is
#: known: a render cache that lost the conversation renders it whole, on the loop (~7 ms at this)
KNOWN_LIGHT_CHARS = 256 * 1024
#: the same, when the earlier request was prepared by a worker (a whole render here, ~2 ms at this)
WARM_UP_CHARS = 64 * 1024


def is_light(ask: Ask) -> bool:
    """Whether ``ask`` is small enough to check and render on the loop. Tool definitions count by
    their JSON size: checking a schema and rendering it cost in proportion to it (a 64 KB schema
    takes ~80 ms to check). Turns of an earlier request that was checked and planned
    (``Ask.known_turns``: an agent's next turn) do not count, up to ``KNOWN_LIGHT_CHARS`` of
    conversation in all when it was planned on this loop (its render is cached here: shipping the
    turns to a worker would cost the loop more than rendering what is new — pickling every turn,
    the prompt back), ``WARM_UP_CHARS`` when a worker planned it, within ``--max-render-ms`` (the
    loop renders them whole once; from then on the conversation's turns are light). A request
    refused (too complex, a template error) lightens nothing."""
    if len(ask.turns) - ask.known_turns > LIGHT_TURNS or len(ask.tools) > LIGHT_TOOLS:
        return False
    chars = known_chars = 0
    for i, turn in enumerate(ask.turns):
        size = len(turn.text)
        for call in turn.calls:
            size += len(call.arguments) if isinstance(call.arguments, str) else 1024
        if i < ask.known_turns:
            known_chars += size
        else:
            chars += size
    if ask.known_turns and known_chars + chars > (KNOWN_LIGHT_CHARS if ask.known_rendered else WARM_UP_CHARS):
        return False
    for tool in ask.tools:
        if chars > LIGHT_CHARS:
            return False
        try:
            chars += len(orjson.dumps(tool.shown))
        except orjson.JSONEncodeError:
            return False  # too deep to encode: the checks will say so, off the loop
    return chars <= LIGHT_CHARS


# ------------------------------------------------------------------------------- what reaches a worker


def _nothing() -> None:
    return None


def _chat_template(cls: type[ChatTemplate], source: str, bos: str, eos: str, name: str, cache_bytes: int,
                   extra: dict[str, Any]) -> ChatTemplate:
    template = cls(source, bos, eos, name)
    template.__dict__.update(extra)
    if cache_bytes:
        template.cache = RenderCache(cache_bytes)
    return template


def _ship_template(template: ChatTemplate) -> tuple[Any, ...]:
    """A chat template as its source (compiled again in the worker), with what was learned about
    it since (its profile) where that pickles, and a render cache of its own as large as the
    server's (``--render-cache-bytes`` is per process)."""
    extra: dict[str, Any] = {}
    for key, value in vars(template).items():
        if key in ("source", "bos_token", "eos_token", "name", "_template", "cache"):
            continue
        with contextlib.suppress(Exception):
            pickle.dumps(value)
            extra[key] = value
    cache_bytes = template.cache.max_bytes if template.cache is not None else 0
    return (_chat_template, (type(template), template.source, template.bos_token, template.eos_token,
                             template.name, cache_bytes, extra))


def _served_model(name: str, backend: Any, template: ChatTemplate | None, parsers: ParserChoice | None,
                  settings: Settings | None, control: Any = None) -> ServedModel:
    if parsers is None:  # parsers built at run time (auto, response-schema): built here the same way
        assert settings is not None
        parsers = choose_parsers(settings, template)
    return ServedModel.of(name, backend, template, parsers, control)


def reducers(settings: Settings | None) -> dict[type, Callable[[Any], tuple[Any, ...]]]:
    """How the process's constants are pickled for a worker: no HTTP clients (a worker never talks to
    the backend), chat templates as source, parsers by name — or, where ``auto`` or
    ``response-schema`` built them at run time, rebuilt in the worker from the settings."""

    def ship_model(model: ServedModel) -> tuple[Any, ...]:
        try:
            pickle.dumps(model.parsers)
            parsers: ParserChoice | None = model.parsers
        except Exception:  # noqa: BLE001 — classes made at run time do not pickle
            parsers = None
        return (_served_model, (model.name, model.backend, model.template, parsers,
                                settings if parsers is None else None, model.control))

    return {httpx.AsyncClient: lambda _: (_nothing, ()), StreamingClient: lambda _: (_nothing, ()),
            ChatTemplate: _ship_template, ServedModel: ship_model}


#: objects a process holds for its lifetime: sent to each worker once, then by name
CONSTANTS: tuple[type, ...] = (Settings, ServedModel)
#: a job still running after this many times its CPU budget in wall time, plus ``WALL_GRACE_S``
#: (a new worker's first job may have to compile the template and import what it runs), is
#: stopped all the same: work stuck where the CPU timer cannot interrupt it
WALL_FACTOR = 4
WALL_GRACE_S = 5.0


# ------------------------------------------------------------------------------- turns at the loop


#: a request body larger than this takes its turn at the loop (``Turns``)
BIG_BODY = 32_768


class Turns:
    """Large requests begin one per turn of the event loop.

    Each request's first stretch on the loop — parsing its body, decoding it into an ``Ask``, the
    checks and render of a light one, handing a heavy one to a worker — runs without a pause until
    it first waits for something. For an agent's 100 KB request that is 2–3 ms; when a burst of
    them arrives together, asyncio would run all of those stretches back to back before anything
    else (a request for ``/v1/models``, the next chunk of every stream) had its turn. A large
    request therefore waits here first, and the next one may go only a loop turn later: the loop
    keeps interleaving everyone else. Small requests never wait.
    """

    def __init__(self) -> None:
        self._lock: asyncio.Lock | None = None

    async def take(self, size: int) -> None:
        """Wait for this request's turn if its body is ``size`` bytes."""
        if size <= BIG_BODY:
            return
        if self._lock is None:
            self._lock = asyncio.Lock()
        await self._lock.acquire()
        asyncio.get_running_loop().call_soon(self._lock.release)  # the next one goes on the next turn


# ------------------------------------------------------------------------------- the pool


class Offloader:
    """See the module docstring. ``start()`` (from a running loop) starts the workers in the
    background; ``run`` starts them if that has not happened yet."""

    def __init__(self, workers: int, deadline_s: float, queue_s: float, settings: Settings | None = None) -> None:
        self.size = workers
        self.deadline_s = deadline_s
        self.queue_s = queue_s
        self._reducers = reducers(settings)
        self._idle: asyncio.Queue[Worker] | None = None
        self._workers: set[Worker] = set()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closed = False

    def start(self) -> None:
        if self._idle is not None or self._closed:
            return
        # the worker freed last goes first: an agent's next turn finds the render cache that its last
        # one filled (while requests wait, they are still served first come, first served)
        self._idle = asyncio.LifoQueue()
        for _ in range(self.size):
            self._spawn()

    async def run(self, light: bool, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)``: inline when ``light``, else in a worker (``fn`` must not mutate ``args``:
        there it runs on copies)."""
        if light:
            return fn(*args)
        self.start()
        assert self._idle is not None
        try:
            async with asyncio.timeout(self.queue_s):
                worker = await self._idle.get()
        except TimeoutError:
            raise APIError(503, f"the server is busy preparing other large requests (none of its {self.size} "
                           f"workers was free within {self.queue_s * 1000:.0f} ms, --max-queue-ms); retry shortly",
                           "server_error", code="server_busy", headers={"Retry-After": "1"}) from None
        job = self._task(self._call(worker, fn, args))
        return await asyncio.shield(job)  # a request cancelled meanwhile leaves the job to finish

    async def _call(self, worker: Worker, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
        try:
            async with asyncio.timeout(self.deadline_s * WALL_FACTOR + WALL_GRACE_S):
                result: T = await worker.call(fn, args, CONSTANTS, self._reducers)
        except (OverBudget, TimeoutError):
            self._replace(worker)
            raise bad_request(f"preparing this request (checking its tools, rendering the chat template) took "
                              f"longer than {self.deadline_s * 1000:.0f} ms (--max-render-ms): shorten the "
                              "conversation or the tools", code="request_too_complex") from None
        except WorkerLost:
            self._replace(worker)
            log.exception("a worker process died while preparing a request")
            raise APIError(500, "the process preparing this request died; retry", "server_error",
                           code="worker_lost") from None
        except asyncio.CancelledError:  # shutting down
            self._replace(worker)
            raise
        except BaseException:  # the job's own failure (a 400, a template error): the worker is fine
            self._release(worker)
            raise
        self._release(worker)
        return result

    # ---- workers

    def _task(self, coro: Any) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved: a job whose client left fails silently

    def _spawn(self) -> None:
        self._task(self._start_worker())

    async def _start_worker(self) -> None:
        try:
            worker = await Worker.start(self.deadline_s)
        except Exception:
            log.exception("could not start a worker process; trying again in 1 s")
            await asyncio.sleep(1)
            if not self._closed:
                self._spawn()
            return
        if self._closed:
            worker.kill()
            return
        self._workers.add(worker)
        self._release(worker)

    def _release(self, worker: Worker) -> None:
        if self._closed or self._idle is None:
            worker.kill()
            return
        self._idle.put_nowait(worker)

    def _replace(self, worker: Worker) -> None:
        worker.kill()
        self._workers.discard(worker)
        if not self._closed:
            self._spawn()

    def close(self) -> None:
        """Stop every worker and cancel what is under way."""
        self._closed = True
        for task in list(self._tasks):
            with contextlib.suppress(RuntimeError):  # at exit the loop may be closed already
                task.cancel()
        for worker in self._workers:
            worker.kill()
        self._workers.clear()
