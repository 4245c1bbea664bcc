"""CPU-heavy request work (tool-schema checks, chat-template rendering) kept off the event loop —
in other processes, so the loop never waits for it — and bounded in time.

A request is *light* when it is small (few turns, little text, few and small tools — what an
earlier request of its conversation decoded and rendered not counted, ``app.prefix``): it is
prepared inline, since shipping it elsewhere would cost more than preparing it. A long
conversation's next turn whose render continues the last one is *continued*: prepared inline too,
its render bounded (``weight``). A heavy one is
prepared by one of a few worker processes (``--prepare-workers``, 2 by default): the standard
library's process pool (``concurrent.futures.ProcessPoolExecutor``, ``forkserver`` start: the
fork server imports the preparing code once, ``PRELOAD``, and every worker is a fork of it). Python
threads would share the interpreter lock with the loop, so every other request and stream would
wait on the work in slices; a process shares nothing with it. What crosses is explicit
(``app.pipeline.prepare``): each worker is given the settings and the served model once, then a
``Job`` per request, and answers a ``Prepared``, a ``Refused`` or ``OverBudget`` — the plan is put
together here, around the caller's own request.

Heavy requests queue for a free worker, first come first served, for at most ``--max-queue-ms``:
past that the request is answered 503 ``server_busy`` with ``Retry-After`` (the bound is in time,
not in count: a burst of agent requests waits its turn instead of being refused). A job may then
use at most ``--max-render-ms`` of CPU time (a busy machine does not count against it: a CPU
timer in the worker), past which the request is answered 400 ``request_too_complex``; a job stuck
where that timer cannot interrupt it (inside one long C call) is stopped by the kernel at
``WALL_FACTOR`` times that CPU time and a little (``RLIMIT_CPU``), which takes its worker with it.
A worker lost before its job answered (killed, out of memory) costs nobody an error: the pool is
replaced (the standard pool breaks whole) and every job it held runs again on a fresh worker,
once — a job that loses its worker twice is answered 503 with ``Retry-After``. The client
waits at most ``WALL_FACTOR`` times the budget (and a little): then 400 ``request_too_complex``.
A job whose client has left runs to its end (or those bounds) in the background, and its worker
is free again then: the queue counts it until it ends.

``Turns`` keeps a burst of large requests from taking the loop all at once (see there).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Literal, TypeVar

import orjson

from app.errors import APIError, bad_request
from app.pipeline.ask import Ask, Tool
from app.pipeline.plan import Plan
from app.pipeline.prepare import (
    STOP_FACTOR,
    STOP_GRACE_S,
    Failed,
    Install,
    Job,
    OverBudget,
    Prepared,
    Refused,
    install,
    planned,
    prepare,
    prepare_job,
    run,
)
from app.pipeline.validate import VERDICTS, known_verdicts, unchecked_bytes
from app.served import ServedModel
from app.settings import Settings
from app.templates.resume import RenderTooLarge, bounded

log = logging.getLogger("toolwire")
T = TypeVar("T")

#: beyond any of these a request is heavy (each bounds what inline work can cost)
LIGHT_TURNS = 64
LIGHT_CHARS = 32_768  # message text, call arguments and tool definitions (their JSON)
LIGHT_TOOLS = 32
#: tool and response-format schemas this process has not checked before (their canonical JSON):
#: beyond this much a request is heavy — a check costs ~5 µs a byte (a 1.5 KB tool schema ~7 ms),
#: and the worker's checks come back to this process (``app.pipeline.validate.known_verdicts``)
LIGHT_UNCHECKED_BYTES = 1024
#: tool definitions (their JSON) up to which a request's schemas are hashed on the loop (~1 ms at
#: this) also when it is heavy for another reason: its job then carries what this process knows of
#: their checks, and its worker does not check again a schema checked here
HASHED_TOOL_CHARS = 128 * 1024
#: conversation text (reused turns included) up to which a request whose render continues the
#: last one is light outright: should the render not continue after all (its captured values
#: changed beyond what its guards allow), it renders whole, on the loop (~7 ms at this). Past it,
#: the request is ``continued``: prepared on the loop as a render bounded to ``CONTINUED_BYTES``
#: of loop iterations, and in a worker (rendered whole) when its render cannot keep to that
KNOWN_LIGHT_CHARS = 256 * 1024
#: the bytes of loop items (their exact encodings) a ``continued`` request's render may run on the loop
CONTINUED_BYTES = 2 * LIGHT_CHARS

#: where a request is prepared (``weight``): on the loop, on the loop as a bounded continued render, in a worker
Weight = Literal["light", "continued", "heavy"]


def _json_size(tool: Tool) -> int | None:
    """The size of the tool's JSON as the template is given it (``None``: too deep to encode)."""
    try:
        return len(orjson.dumps(tool.shown))
    except orjson.JSONEncodeError:
        return None


def weight(ask: Ask) -> Weight:
    """Where ``ask`` is checked and rendered: ``light`` — on the loop; ``heavy`` — in a worker;
    ``continued`` — on the loop, its render bounded to ``CONTINUED_BYTES`` of the template's loop
    (``app.templates.resume.bounded``), and in a worker if it cannot keep to that. Tool definitions
    count by their JSON size: checking a schema and rendering it cost in proportion to it (a 64 KB
    schema takes ~80 ms to check). Turns decoded and checked for an earlier request of the
    conversation (``Ask.reused``: an agent's next turn, ``app.prefix``) do not count when there is a
    render to continue, nor do the tools' definitions once their schemas are checked (their JSON
    is the ``tojson`` memo's): shipping the turns to a worker would cost the loop more than
    rendering what is new — pickling every turn, the prompt back — and the worker, given no render
    to continue, would render the whole conversation. Past ``KNOWN_LIGHT_CHARS`` of conversation
    in all such a request is ``continued``. Schemas this process has not checked before are heavy
    beyond ``LIGHT_UNCHECKED_BYTES``: a new client's first request with its tools is checked off
    the loop, and its next ones, the same tools known, inline; schemas up to ``HASHED_TOOL_CHARS``
    are hashed for a request heavy in another way too, so that its worker knows what was checked
    here. A request refused (too complex, a template error) lightens nothing: nothing of it is kept."""
    reused = ask.prefix is not None and ask.prefix.resume.previous is not None and ask.reused > 0
    fresh = set(ask.fresh_turns()) if reused else None
    if len(ask.tools) > LIGHT_TOOLS:
        return "heavy"
    heavy = (len(fresh) if fresh is not None else len(ask.turns)) > LIGHT_TURNS
    chars = known_chars = 0
    for i, turn in enumerate(ask.turns):
        size = len(turn.text)
        for call in turn.calls:
            size += len(call.arguments) if isinstance(call.arguments, str) else 1024
        if fresh is not None and i not in fresh:
            known_chars += size
        else:
            chars += size
    tool_chars = 0
    for tool in ask.tools:
        shown_size = tool.once("json_size", _json_size)
        if shown_size is None:
            return "heavy"  # too deep to encode: the checks will say so, off the loop
        tool_chars += shown_size
        if tool_chars > HASHED_TOOL_CHARS:
            return "heavy"
    unchecked = unchecked_bytes(ask)  # (hashed also when heavy: its job carries the checks known here)
    if heavy or unchecked > LIGHT_UNCHECKED_BYTES:
        return "heavy"
    if not reused:
        return "light" if chars + tool_chars <= LIGHT_CHARS else "heavy"
    if chars + (tool_chars if unchecked else 0) > LIGHT_CHARS:
        return "heavy"
    return "light" if known_chars + chars <= KNOWN_LIGHT_CHARS else "continued"


def is_light(ask: Ask) -> bool:
    """Whether ``ask`` is prepared on the loop without a bound (``weight``)."""
    return weight(ask) == "light"


#: what the fork server imports once, for every worker it forks
PRELOAD = ["app.pipeline.prepare"]
#: the longest a job's client waits: this many times its CPU budget, plus ``WALL_GRACE_S`` (a new
#: worker's first job may have to compile the template and import what it runs); the kernel stops
#: a job at the same in CPU time (``app.pipeline.prepare.STOP_FACTOR``)
WALL_FACTOR = STOP_FACTOR
WALL_GRACE_S = STOP_GRACE_S


class WorkerLost(Exception):
    """A job's worker died twice before it answered."""


class Pool:
    """See the module docstring. ``prepare`` prepares a request where ``weight`` says; ``run``
    runs any job (a module-level function and picklable arguments) in a worker, bounded the same
    way. The workers start with the first heavy request (the served model they are given is known
    by then), or ``warm``."""

    def __init__(self, workers: int, budget_s: float, queue_s: float, settings: Settings) -> None:
        self.size = workers
        self.budget_s = budget_s
        self.queue_s = queue_s
        self.settings = settings
        self._context = multiprocessing.get_context("forkserver")
        self._context.set_forkserver_preload(PRELOAD)
        self._executor: ProcessPoolExecutor | None = None
        self._model: ServedModel | None = None  # what the executor's workers were given
        self._free: asyncio.Semaphore | None = None
        self._jobs: set[asyncio.Task[Any]] = set()
        self._closed = False

    async def prepare(self, light: bool, ask: Ask, model: ServedModel, schema_key: str,
                      bound: int | None = None) -> Plan:
        """``ask`` checked and planned — inline when ``light`` (its render ``bounded`` to ``bound``
        bytes of loop items, when given: in a worker if it cannot keep to it), else in a worker."""
        if light and bound is None:
            return prepare(ask, self.settings, model, schema_key)
        if light and bound is not None:
            try:
                with bounded(bound):
                    return prepare(ask, self.settings, model, schema_key)
            except RenderTooLarge:
                log.debug("a continued render could not keep to its bound on the loop: prepared in a worker")
        # the checks this process knows of, when ``weight`` worked the schemas out (a request with
        # more than ``HASHED_TOOL_CHARS`` is not hashed on the loop: its worker checks what it does
        # not know itself)
        verdicts = known_verdicts(ask) if ask.schema_texts is not None else ()
        answer = await self.run(model, prepare_job, Job(ask, schema_key, verdicts))
        assert isinstance(answer, Prepared)
        VERDICTS.learn(answer.verdicts)  # a light request with these tools, next, is not checked again here
        return planned(ask, model, self.settings, answer)

    async def run(self, model: ServedModel | None, work: Callable[..., T], *args: Any) -> T:
        """``work(*args)`` in a worker given ``model`` (see the module docstring)."""
        if self._closed:
            raise APIError(503, "the server is shutting down", "server_error", code="server_busy",
                           headers={"Retry-After": "1"})
        if self._free is None:
            self._free = asyncio.Semaphore(self.size)
        try:
            async with asyncio.timeout(self.queue_s):
                await self._free.acquire()
        except TimeoutError:
            raise APIError(503, f"the server is busy preparing other large requests (none of its {self.size} "
                           f"workers was free within {self.queue_s * 1000:.0f} ms, --max-queue-ms); retry shortly",
                           "server_error", code="server_busy", headers={"Retry-After": "1"}) from None
        job = asyncio.get_running_loop().create_task(self._job(model, work, args))
        self._jobs.add(job)
        job.add_done_callback(self._ended)
        try:
            async with asyncio.timeout(self.budget_s * WALL_FACTOR + WALL_GRACE_S):
                result: T = await asyncio.shield(job)  # a request cancelled meanwhile leaves the job to end
        except TimeoutError:
            raise self._too_complex() from None
        except WorkerLost:
            raise APIError(503, "the process preparing this request was lost, twice; retry shortly", "server_error",
                           code="worker_lost", headers={"Retry-After": "1"}) from None
        if isinstance(result, OverBudget):
            raise self._too_complex()
        if isinstance(result, (Refused, Failed)):
            raise result.error()
        return result

    def _too_complex(self) -> APIError:
        return bad_request(f"preparing this request (checking its tools, rendering the chat template) took longer "
                           f"than {self.budget_s * 1000:.0f} ms (--max-render-ms): shorten the conversation or the "
                           "tools", code="request_too_complex")

    async def _job(self, model: ServedModel | None, work: Callable[..., T], args: tuple[Any, ...]) -> T:
        """The job, holding its place in the queue until it ends: again on a fresh pool if its
        worker was lost."""
        try:
            for attempt in (1, 2):
                executor = self._executor_for(model)
                try:
                    result: T = await asyncio.wrap_future(executor.submit(run, self.budget_s, work, *args))
                    return result
                except (BrokenProcessPool, OSError) as exc:  # OSError: no new worker (the fork server is gone)
                    log.warning("a prepare worker was lost (%s); its jobs run again on fresh workers (attempt %d)",
                                type(exc).__name__, attempt)
                    self._discard(executor)
            raise WorkerLost
        finally:
            assert self._free is not None
            self._free.release()

    def _ended(self, job: asyncio.Task[Any]) -> None:
        self._jobs.discard(job)
        if not job.cancelled():
            job.exception()  # retrieved: a job whose client left fails silently

    def _executor_for(self, model: ServedModel | None) -> ProcessPoolExecutor:
        if self._executor is not None and (model is None or model is self._model):
            return self._executor
        if self._executor is not None:
            self._discard(self._executor)
        message = Install.of(self.settings, model) if model is not None else Install(self.settings)
        self._executor = ProcessPoolExecutor(self.size, mp_context=self._context, initializer=install,
                                             initargs=(message,))
        self._model = model
        return self._executor

    def warm(self, model: ServedModel) -> None:
        """Start the workers for ``model`` now (each forked and given the model before a job needs it)."""
        executor = self._executor_for(model)
        for _ in range(self.size):
            executor.submit(int)

    def _discard(self, executor: ProcessPoolExecutor) -> None:
        if self._executor is executor:
            self._executor, self._model = None, None
        kill_workers(executor)
        executor.shutdown(wait=False, cancel_futures=True)

    def workers(self) -> list[int]:
        """The pids of the workers now running (tests, diagnostics)."""
        return [p.pid for p in _processes(self._executor) if p.pid is not None] if self._executor else []

    def close(self) -> None:
        """Stop every worker and what is under way."""
        self._closed = True
        for job in list(self._jobs):
            with contextlib.suppress(RuntimeError):  # at exit the loop may be closed already
                job.cancel()
        if self._executor is not None:
            self._discard(self._executor)


def _processes(executor: ProcessPoolExecutor) -> list[Any]:
    """The executor's worker processes. The standard pool has no public way to reach them before
    Python 3.14 (``terminate_workers``): ``_processes`` is its own table of them, checked by
    ``tests/app/pipeline/test_pool.py::test_the_pools_private_table_is_what_we_rely_on``."""
    table = getattr(executor, "_processes", None) or {}
    return list(table.values())


def kill_workers(executor: ProcessPoolExecutor) -> None:
    """Stop ``executor``'s workers at once (SIGKILL): a worker may be stuck in a job no one waits for."""
    kill = getattr(executor, "kill_workers", None)  # Python 3.14
    if kill is not None:
        with contextlib.suppress(Exception):
            kill()
        return
    for process in _processes(executor):
        with contextlib.suppress(Exception):
            process.kill()


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


