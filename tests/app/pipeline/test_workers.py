"""``app.pipeline.workers`` and ``app.pipeline.offload``: work in real worker processes — what crosses
to a worker and back (a plan made there is the plan made here, without the request travelling
back), its failures, its bounds (CPU time, queue time), and the loop turns of large requests."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.api.answer import prepare
from app.api.chat.decode import chat_ask, parse_request
from app.backends import Backend
from app.backends.vllm import Vllm
from app.errors import APIError, bad_request
from app.pipeline.ask import Ask, Tool
from app.pipeline.offload import (
    BIG_BODY,
    CONSTANTS,
    KNOWN_LIGHT_CHARS,
    Offloader,
    Turns,
    is_light,
    reducers,
)
from app.pipeline.workers import OverBudget, Worker, WorkerLost, handles, resolve
from app.prefix import Note
from app.served import ServedModel, choose_parsers
from app.settings import Settings
from app.templates.chat_template import ChatTemplate
from app.templates.resume import RenderState
from tests.conftest import QWEN3_TEMPLATE

TEMPLATES = Path(__file__).resolve().parents[2] / "data" / "templates"

# ----------------------------------------------------------------------------- jobs (run in the worker)


def same(value: Any) -> Any:
    return value


def first_tool(ask: Ask) -> Tool:
    return ask.tools[0]


def name_of(model: ServedModel) -> str:
    return model.name


def refuse() -> None:
    raise bad_request("no such thing", "tools.0", code="no_such_thing")


def die() -> None:
    os._exit(3)


def spin() -> None:
    while True:
        pass


def nap(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


# ----------------------------------------------------------------------------- fixtures


@pytest.fixture
async def worker() -> AsyncIterator[Worker]:
    started = await Worker.start(cpu_budget_s=0.5)
    yield started
    started.kill()


def agent_ask(turns: int = 40, tool_choice: str | None = None) -> Ask:
    """An agent-shaped request: a system prompt, tools, ``turns`` finished tool calls, decoded as the
    Chat Completions face does."""
    tools = [{"type": "function", "function": {"name": f"tool_{t}", "description": f"tool {t}", "parameters": {
        "type": "object", "properties": {"path": {"type": "string"}, "n": {"type": "integer"}},
        "required": ["path"]}}} for t in range(4)]
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are an agent. " * 50},
                                      {"role": "user", "content": "Fix the tests."}]
    for r in range(turns):
        messages.append({"role": "assistant", "content": None, "tool_calls": [{
            "id": f"call_{r}", "type": "function",
            "function": {"name": f"tool_{r % 4}", "arguments": f'{{"path": "src/f{r}.py", "n": {r}}}'}}]})
        messages.append({"role": "tool", "tool_call_id": f"call_{r}", "content": f"result {r} " * 20})
    body: dict[str, Any] = {"model": "m", "messages": messages, "tools": tools}
    if tool_choice is not None:
        body["tool_choice"] = tool_choice
    return chat_ask(parse_request(body, Settings()))


def served(template_file: Path, settings: Settings) -> ServedModel:
    template = ChatTemplate.load(template_file)
    backend = Backend("http://unused", httpx.AsyncClient(), dialect=Vllm())
    return ServedModel.of("m", backend, template, choose_parsers(settings, template))


# ----------------------------------------------------------------------------- what crosses


@pytest.mark.parametrize(("template", "parsers", "tool_choice"), [
    ("Qwen-Qwen3-0.6B.jinja", "qwen25", None),
    ("Qwen-Qwen3-0.6B.jinja", "qwen25", "required"),  # a constraint comes back too
    # parsers ``auto`` built from the template at run time (classes that do not pickle): rebuilt there
    ("upstage-Solar-Open-100B.jinja", "auto", None),
    ("CohereForAI-c4ai-command-r-plus-tool_use.jinja", "auto", None),
])
async def test_a_plan_made_in_a_worker_is_the_plan_made_here(worker: Worker, template: str, parsers: str,
                                                            tool_choice: str | None) -> None:
    settings = Settings(backend="http://unused", chat_template=TEMPLATES / template, tool_call_parser=parsers,
                        reasoning_parser="auto")
    model = served(TEMPLATES / template, settings)
    ask = agent_ask(tool_choice=tool_choice)
    here = prepare(ask, settings, model, "function.parameters")
    there = await worker.call(prepare, (ask, settings, model, "function.parameters"), CONSTANTS, reducers(settings))
    assert there.prompt == here.prompt and len(there.prompt) > 10_000
    assert there.constraint == here.constraint
    assert (there.in_reasoning, there.parse_tools, there.max_calls) == (here.in_reasoning, here.parse_tools,
                                                                         here.max_calls)
    # what came from the request and the model is the caller's own, not a copy
    assert there.ask is ask and there.formats is model.formats
    assert all(a is b for a, b in zip(there.tools, ask.tools, strict=True))
    assert all(a is b.spec for a, b in zip(there.specs, ask.tools, strict=True))
    assert type(there.parser()) is type(here.parser())


async def test_results_refer_back_to_the_arguments_and_new_objects_travel(worker: Worker) -> None:
    ask = agent_ask(turns=3)
    assert await worker.call(first_tool, (ask,)) is ask.tools[0]
    copy = await worker.call(same, ([1, "two", {"three": 3}],))
    assert copy == [1, "two", {"three": 3}]


async def test_constants_reach_a_worker_once_and_a_new_one_replaces_the_old(worker: Worker) -> None:
    settings = Settings(backend="http://unused", chat_template=QWEN3_TEMPLATE, tool_call_parser="qwen25")
    first = served(QWEN3_TEMPLATE, settings)
    second = ServedModel.of("other", first.backend, first.template, first.parsers)
    assert await worker.call(name_of, (first,), CONSTANTS, reducers(settings)) == "m"
    assert worker.installed["ServedModel"] is first
    assert await worker.call(name_of, (first,), CONSTANTS, reducers(settings)) == "m"
    assert await worker.call(name_of, (second,), CONSTANTS, reducers(settings)) == "other"
    assert worker.installed["ServedModel"] is second


async def test_a_worker_keeps_nothing_and_its_render_comes_back(worker: Worker) -> None:
    """A worker renders whole (the request's note stays here) and its render's state comes back
    with the plan: the next turn, prepared here, continues it."""
    settings = Settings(backend="http://unused", chat_template=QWEN3_TEMPLATE, tool_call_parser="qwen25")
    model = served(QWEN3_TEMPLATE, settings)
    ask = agent_ask(turns=40)
    ask.prefix = Note(None, b"", [], [], [], ask.turns, None, None, None, [])
    there = await worker.call(prepare, (ask, settings, model, "function.parameters"), CONSTANTS, reducers(settings))
    assert there.ask is ask and there.render is not None and there.render.source is None  # identity stays here
    follow = agent_ask(turns=41)
    follow.prefix = Note(None, b"", [], [], [], follow.turns, None, there.render, None, [])
    here = prepare(follow, settings, model, "function.parameters")
    assert here.reused_iterations > 70
    assert here.prompt == prepare(agent_ask(turns=41), settings, model, "function.parameters").prompt


def test_handles_are_paths_from_the_arguments() -> None:
    ask = agent_ask(turns=2)
    args = (ask, "key")
    found = {id(obj): path for obj, path in handles(args)}
    assert found[id(ask)] == (0,) and found[id(ask.tools[1].spec)] == (0, "tools", 1, "spec")
    assert all(resolve(args, path) is obj for obj, path in handles(args))
    assert resolve(args, found[id(ask.tools[1].spec.parameters)]) is ask.tools[1].spec.parameters
    assert id("key") not in found  # strings and numbers travel by value
    assert handles((ask,), skip=(ask,)) == []


# ----------------------------------------------------------------------------- failures and bounds


async def test_the_jobs_exception_is_raised_here_with_the_workers_traceback(worker: Worker) -> None:
    with pytest.raises(APIError) as raised:
        await worker.call(refuse, ())
    exc = raised.value
    assert (exc.status, exc.param, exc.code, exc.message) == (400, "tools.0", "no_such_thing", "no such thing")
    assert "in the worker process" in "".join(exc.__notes__)
    assert await worker.call(same, (1,)) == 1  # the worker goes on


async def test_a_job_past_its_cpu_budget_is_stopped(worker: Worker) -> None:
    with pytest.raises(OverBudget):
        await asyncio.wait_for(worker.call(spin, ()), 60)


async def test_a_worker_that_dies_is_reported(worker: Worker) -> None:
    with pytest.raises(WorkerLost):
        await worker.call(die, ())


async def test_past_the_cpu_budget_a_400_and_the_worker_is_replaced() -> None:
    offloader = Offloader(1, 0.3, 30)
    try:
        with pytest.raises(APIError) as raised:
            await offloader.run(False, spin)
        assert raised.value.status == 400 and raised.value.code == "request_too_complex"
        assert await offloader.run(False, same, "next") == "next"  # a new worker
    finally:
        offloader.close()


async def test_past_the_queue_bound_a_503_and_a_burst_within_it_is_served() -> None:
    offloader = Offloader(1, 5, 0.3)
    try:
        busy = asyncio.ensure_future(offloader.run(False, nap, 1.5))
        await asyncio.sleep(0.2)
        with pytest.raises(APIError) as refused:
            await offloader.run(False, same, 1)
        assert refused.value.status == 503 and refused.value.code == "server_busy"
        assert refused.value.headers["Retry-After"] == "1"
        assert await busy == 1.5
    finally:
        offloader.close()
    offloader = Offloader(2, 5, 60)
    try:  # more jobs at once than the old bound of 8, none refused
        assert await asyncio.gather(*(offloader.run(False, nap, 0.05) for _ in range(24))) == [0.05] * 24
    finally:
        offloader.close()


async def test_a_job_whose_caller_left_finishes_and_frees_its_worker() -> None:
    offloader = Offloader(1, 5, 30)
    try:
        left = asyncio.ensure_future(offloader.run(False, nap, 0.5))
        await asyncio.sleep(0.2)
        left.cancel()
        assert await offloader.run(False, same, "after") == "after"
    finally:
        offloader.close()


# ----------------------------------------------------------------------------- light, and turns


def test_tool_definitions_count_toward_heavy() -> None:
    ask = agent_ask(turns=1)
    assert is_light(ask)
    big = {"type": "object", "properties": {f"p{k}": {"type": "string", "description": "x" * 200}
                                            for k in range(160)}}  # ~37 KB
    ask.tools.append(Tool.function("big", big))
    assert not is_light(ask)


def reusing(ask: Ask, reused: int, rendered: bool = True) -> Ask:
    """``ask`` with its first ``reused`` turns decoded before (and a render to continue, or not)."""
    previous = RenderState([], b"", [], [], [], None, None, None, 0) if rendered else None
    ask.prefix = Note(None, b"", [], [], [], ask.turns, [(reused, len(ask.turns))], previous, None, [])
    return ask


def test_reused_turns_do_not_count_up_to_a_bound() -> None:
    """An agent's next turn, whose earlier turns this process decoded and rendered before, is
    weighed by what is new in it — up to ``KNOWN_LIGHT_CHARS`` of conversation in all — when
    there is a render to continue."""
    ask = agent_ask(turns=100)
    assert not is_light(ask)
    assert is_light(reusing(ask, len(ask.turns) - 2))
    assert not is_light(reusing(ask, 2))  # most of it new
    assert not is_light(reusing(ask, len(ask.turns) - 2, rendered=False))  # nothing to continue: rendered whole
    big = agent_ask(turns=100)
    big.turns[5].text = "x" * KNOWN_LIGHT_CHARS
    assert not is_light(reusing(big, len(big.turns) - 2))


async def test_large_bodies_begin_one_per_loop_turn() -> None:
    turns = Turns()
    order: list[str] = []

    async def request(name: str, size: int) -> None:
        await turns.take(size)
        order.append(name)

    def other() -> None:
        order.append("other")

    tasks = [asyncio.ensure_future(request(f"big{i}", BIG_BODY + 1)) for i in range(3)]
    tasks.append(asyncio.ensure_future(request("small", 100)))
    asyncio.get_running_loop().call_soon(other)
    await asyncio.gather(*tasks)
    assert order.index("small") < order.index("big1") and order.index("other") < order.index("big1")
    assert order.index("big0") < order.index("big1") < order.index("big2")
