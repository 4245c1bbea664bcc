"""Preparing a request: checking it and planning it (``prepare``) — the CPU-heavy part of an answer,
which ``app.pipeline.offload`` runs inline or in a worker process — and the typed messages that
carry it to a worker and back.

A worker is given the process's settings and served model once (``Install``, its pool's
initializer), then one ``Job`` per request: the ``Ask``, where its tool schemas sit and what the
server knows of their checks. It answers with one message — the plan's parts (``Prepared``: the
prompt, its start state, the constraint, the render's state for the conversation's next turn, the
checks of its schemas), or the refusal the checks or the template made (``Refused``: a 400, as
the client gets it), or ``OverBudget`` when the job used up its CPU time. The caller rebuilds the
``Plan`` around its own ``Ask`` and model (``planned``): nothing of the request travels back.
"""

from __future__ import annotations

import contextlib
import gc
import math
import os
import resource
import select
import signal
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

from app.allocator import tune
from app.backends.base import Backend
from app.constraints.tools import Constraint
from app.errors import APIError
from app.parser_choice import ParserChoice
from app.pipeline.ask import Ask
from app.pipeline.plan import Plan, offered, plan_request
from app.pipeline.validate import VERDICTS, Verdicts, check_ask, known_verdicts
from app.served import ServedModel, choose_parsers
from app.settings import Settings
from app.templates.chat_template import ChatTemplate, TemplateError
from app.templates.literal import ControlText, Span
from app.templates.resume import RenderState


def render_error(exc: TemplateError) -> APIError:
    """The 400 a template's refusal is."""
    return APIError(400, f"chat template rejected the request: {exc}", code="template_error")


def prepare(ask: Ask, settings: Settings, model: ServedModel, schema_key: str) -> Plan:
    """Check the request and plan it (it runs inline or, on a copy of ``ask``, in a worker: it
    changes nothing in it). A refusal is an ``APIError``."""
    check_ask(ask, settings, schema_key=schema_key)
    try:
        return plan_request(ask, model.formats, model.require_template(), model.backend,
                            settings.max_calls_per_answer, model.control)
    except TemplateError as exc:
        raise render_error(exc) from None


# ------------------------------------------------------------------------------- the messages


@dataclass(frozen=True, slots=True)
class Install:
    """What a worker is given once: the settings and the served model — its backend and template
    travel without their clients and compiled code (``Backend`` and ``ChatTemplate`` pickle so), its
    parsers by name, or (``parsers`` ``None``: made at run time, ``auto`` or ``response-schema``)
    made again there from the settings."""

    settings: Settings
    name: str = ""  # "": no model (a job that plans nothing)
    backend: Backend | None = None
    template: ChatTemplate | None = None
    parsers: ParserChoice | None = None
    control: ControlText | None = None
    #: the server process the worker serves: the worker ends when it does (``outlive_not``)
    server: int = field(default_factory=os.getpid)

    @classmethod
    def of(cls, settings: Settings, model: ServedModel) -> Install:
        import pickle

        try:
            pickle.dumps(model.parsers)
            parsers: ParserChoice | None = model.parsers
        except Exception:  # noqa: BLE001 — classes made at run time do not pickle
            parsers = None
        return cls(settings, model.name, model.backend, model.template, parsers, model.control)

    def model(self) -> ServedModel | None:
        if self.backend is None:
            return None
        parsers = self.parsers if self.parsers is not None else choose_parsers(self.settings, self.template)
        return ServedModel.of(self.name, self.backend, self.template, parsers, self.control)


@dataclass(frozen=True, slots=True)
class Job:
    """One request to prepare: its ``Ask`` (without its note: ``app.prefix``), where the face
    spells its tool schemas' place (errors name it), and what the server knows of the checks of
    its schemas (``app.pipeline.validate.known_verdicts``, when the server worked them out: a
    worker does not check again a schema the server checked)."""

    ask: Ask
    schema_key: str
    verdicts: Verdicts = ()


@dataclass(frozen=True, slots=True)
class Prepared:
    """A plan's parts, as made in the worker (``planned`` puts them around the caller's objects), and
    the checks of the request's schemas, for the server to know them too (``verdicts``)."""

    prompt: str
    in_reasoning: bool
    constraint: Constraint
    parse_tools: bool
    prefill: str
    spans: tuple[Span, ...]
    render: RenderState | None
    reused_iterations: int
    clean: int
    verdicts: Verdicts = ()


@dataclass(frozen=True, slots=True)
class Refused:
    """The request refused (the checks, the template): the ``APIError`` the client gets, in parts."""

    status: int
    message: str
    type: str
    param: str | None
    code: str | None

    def error(self) -> APIError:
        return APIError(self.status, self.message, self.type, self.param, self.code)


@dataclass(frozen=True, slots=True)
class OverBudget:
    """The job used up its CPU time (``--max-render-ms``)."""


@dataclass(frozen=True, slots=True)
class Failed:
    """The job raised something else (a bug): what and where, for the caller to raise and log."""

    kind: str
    message: str
    trace: str

    def error(self) -> RuntimeError:
        exc = RuntimeError(f"{self.kind}: {self.message}")
        exc.add_note("in the worker process:\n" + self.trace)
        return exc


Answer = Prepared | Refused | OverBudget | Failed


def planned(ask: Ask, model: ServedModel, settings: Settings, answer: Prepared) -> Plan:
    """The ``Plan`` a worker's answer describes, around the caller's own ``ask`` and ``model``."""
    tools = offered(ask)
    return Plan(ask, answer.prompt, tools, tuple(t.spec for t in tools), model.formats, answer.in_reasoning,
                answer.constraint, answer.parse_tools, settings.max_calls_per_answer, answer.prefill, answer.spans,
                render=answer.render, reused_iterations=answer.reused_iterations, clean=answer.clean)


# ------------------------------------------------------------------------------- the worker side


class _Spent(BaseException):
    """The CPU timer fired (a ``BaseException``: a job's own ``except Exception`` does not catch it)."""


def _spent(_signum: int, _frame: Any) -> None:
    raise _Spent


#: in a worker: what ``Install`` gave it
_installed: dict[str, Any] = {}


def install(message: Install) -> None:
    """A worker's start (its pool's initializer): keep the settings and the model; ignore the
    signals a terminal or a service manager sends the whole process group — the server decides
    when its workers stop, and a draining server still needs them."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGPROF, _spent)
    signal.signal(signal.SIGXCPU, signal.SIG_DFL)  # past the kernel's stop (``run``): the worker ends
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1]))  # and dumps nothing
    outlive_not(message.server)
    tune()  # the allocator's thresholds: a worker renders large prompts too (``app.allocator``)
    _installed["settings"] = message.settings
    _installed["model"] = message.model()
    gc.freeze()  # what every job shares stays out of the collector's way


def outlive_not(server: int) -> None:
    """End this worker when the process ``server`` ends, however it ends (SIGKILL too). A worker is
    the fork server's child, not the server's, so the kernel's parent-death signal cannot say it;
    and the pool's queues, whose ends every worker holds, never reach EOF. Without this a killed
    server leaves its workers, the fork server (alive while a worker is) and the resource tracker
    behind. A thread waits on a pidfd of the server (Linux ≥ 5.3), else looks once a second."""
    try:
        handle: int | None = os.pidfd_open(server)
    except (AttributeError, OSError):
        handle = None

    def watch() -> None:
        if handle is not None:
            select.select([handle], [], [])
        else:
            while _alive(server):
                time.sleep(1.0)
        os._exit(0)

    threading.Thread(target=watch, name="toolwire-server-watch", daemon=True).start()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def run(budget_s: float, work: Any, *args: Any) -> Any:
    """``work(*args)`` with at most ``budget_s`` of CPU time (0: no bound): its result, or the
    message saying how it failed — ``OverBudget()`` when it used its time up, ``Refused`` for an
    ``APIError``, ``Failed`` for anything else (what crosses back is always plain data). A job
    stuck where the timer cannot interrupt it is stopped by the kernel (``RLIMIT_CPU``: its worker
    with it) once it used ``stop_factor`` times its budget and ``stop_grace_s`` more."""
    if budget_s:
        used = resource.getrusage(resource.RUSAGE_SELF)
        stop = math.ceil(used.ru_utime + used.ru_stime + budget_s * STOP_FACTOR + STOP_GRACE_S)
        _cpu_limit(stop)
        signal.setitimer(signal.ITIMER_PROF, budget_s)
    try:
        return work(*args)
    except _Spent:
        return OverBudget()
    except APIError as exc:
        return Refused(exc.status, exc.message, exc.type, exc.param, exc.code)
    except Exception as exc:  # noqa: BLE001 — anything else goes back as data, to be raised there
        return Failed(type(exc).__name__, str(exc), "".join(traceback.format_exception(exc)))
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        if budget_s:
            _cpu_limit(resource.RLIM_INFINITY)


#: a job's CPU time past which the kernel stops its worker: this many times its budget, and a little
STOP_FACTOR = 4
STOP_GRACE_S = 5.0


def _cpu_limit(seconds: int) -> None:
    """The worker's soft ``RLIMIT_CPU`` (SIGXCPU, whose default action ends the process, when its
    CPU time passes it): set below the hard limit, which an unprivileged process cannot raise again."""
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    if hard != resource.RLIM_INFINITY:
        seconds = hard if seconds == resource.RLIM_INFINITY else min(seconds, hard)
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_CPU, (seconds, hard))


def prepare_job(job: Job) -> Answer:
    """A worker's ``Job``, answered (see the module docstring)."""
    VERDICTS.learn(job.verdicts)
    plan = prepare(job.ask, _installed["settings"], _installed["model"], job.schema_key)
    return Prepared(plan.prompt, plan.in_reasoning, plan.constraint, plan.parse_tools, plan.prefill, plan.spans,
                    plan.render, plan.reused_iterations, plan.clean, known_verdicts(job.ask))


__all__ = ["Answer", "Failed", "Install", "Job", "OverBudget", "Prepared", "Refused", "install", "planned", "prepare",
           "prepare_job", "run"]
