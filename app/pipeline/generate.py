"""The one pipeline: ``generate(ask, model, services) -> Choices`` — a request decoded by a face
(its ``Ask``) checked, planned, fitted and started — owned here for every face and for background
responses alike.

* **plan** — ``prepare`` (checks, render, constraint: ``app.pipeline.prepare``), inline for a light
  request, in a worker for a heavy one (``app.pipeline.offload``); a render made by a worker comes
  back with the plan, for the request's note to keep (``app.prefix``);
* **fit** — ``max_tokens`` within the cap and the backend's context (``app.pipeline.budget``; the
  headers saying so ride on the ``Choices``);
* **launch** — ask the backend for the ``ask.n`` answers (each choice's first item arrives), the
  parsers made while it works on the first token, and what the request leaves for its
  conversation's next turn kept then (``app.prefix``).

A background response is planned and fitted with its request (its 4xx come at once: ``generate``
with ``launch`` false) and launched by its detached task (``Generation.launch``). ``Generating`` is
what this needs of the process's services — no more.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Literal, overload

from app.errors import BackendError
from app.media.fetch import resolve_media
from app.metrics import Metrics
from app.pipeline.ahead import Ahead
from app.pipeline.ask import Ask
from app.pipeline.budget import fit_max_tokens
from app.pipeline.choices import Choices, open_choices
from app.pipeline.literal import encode_prompt
from app.pipeline.offload import CONTINUED_BYTES, Pool, weight
from app.pipeline.plan import Plan, shared_memo
from app.pipeline.run import Run
from app.prefix import PrefixService, keep_after
from app.served import ServedModel
from app.settings import Settings

log = logging.getLogger("toolwire")


@dataclass(frozen=True, slots=True)
class Generating:
    """What generating needs of the process's services: the settings, the metrics, the prepare
    workers and the prefix service."""

    settings: Settings
    metrics: Metrics
    pool: Pool
    prefix: PrefixService


@dataclass
class Generation:
    """A request planned and fitted, ready to launch: its ``Ask``, ``Plan`` and model, and the headers
    the fitting says (``X-Toolwire-Max-Tokens``)."""

    ask: Ask
    plan: Plan
    model: ServedModel
    services: Generating
    headers: dict[str, str] = field(default_factory=dict)

    async def launch(self, started: float | None = None) -> Choices:
        """Start the ``ask.n`` answers (each choice's first backend item has arrived); a
        ``BackendError`` when the backend refuses or cannot be reached. ``started``: when the
        request began (for the time to first token)."""
        ask, planned, model = self.ask, self.plan, self.model
        settings, metrics = self.services.settings, self.services.metrics
        if planned.spans:  # client control text kept text: the prompt in tokens (app.pipeline.literal); rare
            await encode_prompt(planned, model)
        if settings.log_content:
            log.debug("prompt", extra={"fields": {"prompt": planned.prompt}})
        # the backend is asked first; the parsers are made while it works on the first token, and what
        # the request leaves for the conversation's next turn is kept then
        built = Ahead(lambda: [planned.parser() for _ in range(ask.n)])
        asyncio.get_running_loop().call_soon(keep_after, ask.prefix)
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
        if started is not None:
            metrics.ttft.observe(time.monotonic() - started)
        hold = ask.hold_tool_calls if ask.hold_tool_calls is not None else settings.hold_tool_calls
        runs = [Run(first, stream, planned, parser, metrics, hold, count_prompt=k == 0)
                for k, (first, stream, parser) in enumerate(zip(firsts, streams, parsers, strict=True))]
        if settings.log_content:
            for run in runs:
                run.text = []
        return Choices(runs, demux, self.headers)


async def plan(ask: Ask, model: ServedModel, services: Generating, schema_key: str = "function.parameters") -> Plan:
    """``ask`` checked and planned (inline or in a worker: ``weight``) — its remote images fetched
    first, where the server fetches them (``app.media.fetch``): a prompt is only ever planned whole."""
    await resolve_media(ask, services.settings)
    note = ask.prefix
    if note is not None:
        note.for_model()
    where = weight(ask)
    light = where != "heavy"
    shared = shared_memo.set(services.prefix if light and services.prefix.enabled else None)
    try:
        planned = await services.pool.prepare(light, ask, model, schema_key,
                                              CONTINUED_BYTES if where == "continued" else None)
    finally:
        shared_memo.reset(shared)
    if note is not None:
        if note.resume.state is None:  # rendered by a worker: its state came back
            note.resume.state = planned.render
        note.clean = planned.clean
    return planned


async def prepared(ask: Ask, model: ServedModel, services: Generating,
                   schema_key: str = "function.parameters") -> Generation:
    """``ask`` checked, planned and fitted: ready to launch."""
    planned = await plan(ask, model, services, schema_key)
    headers = await fit_max_tokens(ask.sampling, planned, model, services.settings)
    return Generation(ask, planned, model, services, headers)


@overload
async def generate(ask: Ask, model: ServedModel, services: Generating, schema_key: str = ...,
                   started: float | None = ..., *, launch: Literal[True] = ...) -> Choices: ...


@overload
async def generate(ask: Ask, model: ServedModel, services: Generating, schema_key: str = ...,
                   started: float | None = ..., *, launch: bool) -> Choices | Generation: ...


async def generate(ask: Ask, model: ServedModel, services: Generating, schema_key: str = "function.parameters",
                   started: float | None = None, *, launch: bool = True) -> Choices | Generation:
    """``ask`` checked, planned, fitted and started (see the module docstring) — or, ``launch``
    false, checked, planned and fitted, for its detached task to start (``Generation.launch``)."""
    planned = prepared(ask, model, services, schema_key)
    return await (await planned).launch(started) if launch else await planned


__all__ = ["Generating", "Generation", "generate", "plan", "prepared"]
