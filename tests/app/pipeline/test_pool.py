"""``app.pipeline.offload``'s pool and ``app.pipeline.prepare``'s messages: work in real worker
processes of the standard library's pool — what crosses (a plan made there is the plan made here,
around the caller's own request), its failures (a refusal, a job past its CPU time, a worker lost),
its bounds (the queue in time), the loop turns of large requests. Work is held in a worker by a
FIFO the test writes to: no test waits on a sleep."""

from __future__ import annotations

import asyncio
import os
import select
import signal
from collections.abc import AsyncIterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.api.chat.decode import chat_ask
from app.api.chat.parse import parse_request
from app.backends import Backend
from app.backends.vllm import Vllm
from app.errors import APIError, bad_request
from app.pipeline.ask import Ask, Tool
from app.pipeline.offload import BIG_BODY, CONTINUED_BYTES, KNOWN_LIGHT_CHARS, Pool, Turns, _processes, is_light, weight
from app.pipeline.prepare import prepare
from app.prefix import Note
from app.served import ServedModel, choose_parsers
from app.settings import Settings
from app.templates.chat_template import ChatTemplate
from app.templates.resume import RenderState
from tests.conftest import QWEN3_TEMPLATE

TEMPLATES = Path(__file__).resolve().parents[2] / "data" / "templates"

# ----------------------------------------------------------------------------- jobs (run in a worker)


def same(value: Any) -> Any:
    return value


def refuse() -> None:
    raise bad_request("no such thing", "tools.0", code="no_such_thing")


def spin() -> None:
    while True:
        pass


def held(started: str, release: str) -> int:
    """Say which worker runs the job (``started``), then wait until the test writes ``release``."""
    with open(started, "w") as f:
        f.write(str(os.getpid()))
    with open(release) as f:
        return len(f.read())


class Hold:
    """A job held in a worker until the test releases it (two FIFOs: the worker says it started and
    which process it is; the test lets it go)."""

    def __init__(self, where: Path, name: str = "hold") -> None:
        self.started, self.release = where / f"{name}-started", where / f"{name}-release"
        os.mkfifo(self.started)
        os.mkfifo(self.release)

    def job(self, pool: Pool) -> asyncio.Future[int]:
        return asyncio.ensure_future(pool.run(None, held, str(self.started), str(self.release)))

    async def running(self) -> int:
        """The pid of the worker running the job, once it runs."""
        def read() -> int:
            with open(self.started) as f:
                return int(f.read())
        return await asyncio.to_thread(read)

    async def let_go(self) -> None:
        def write() -> None:
            with open(self.release, "w") as f:
                f.write("go")
        await asyncio.to_thread(write)


# ----------------------------------------------------------------------------- fixtures


SETTINGS = Settings(backend="http://unused", chat_template=QWEN3_TEMPLATE, tool_call_parser="qwen25")


@pytest.fixture
async def pool() -> AsyncIterator[Pool]:
    made = Pool(1, 0.5, 30, SETTINGS)
    yield made
    made.close()


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
async def test_a_plan_made_in_a_worker_is_the_plan_made_here(template: str, parsers: str,
                                                            tool_choice: str | None) -> None:
    settings = Settings(backend="http://unused", chat_template=TEMPLATES / template, tool_call_parser=parsers,
                        reasoning_parser="auto")
    model = served(TEMPLATES / template, settings)
    pool = Pool(1, 5, 30, settings)
    try:
        ask = agent_ask(tool_choice=tool_choice)
        here = prepare(ask, settings, model, "function.parameters")
        there = await pool.prepare(False, ask, model, "function.parameters")
    finally:
        pool.close()
    assert there.prompt == here.prompt and len(there.prompt) > 10_000
    assert there.constraint == here.constraint
    assert (there.in_reasoning, there.parse_tools, there.max_calls) == (here.in_reasoning, here.parse_tools,
                                                                         here.max_calls)
    assert there.ask is ask and there.formats is model.formats  # the caller's own objects, not copies
    assert all(a is b for a, b in zip(there.tools, ask.tools, strict=True))
    assert type(there.parser()) is type(here.parser())


async def test_a_worker_keeps_nothing_and_its_render_comes_back() -> None:
    """A worker renders whole (the request's note stays here) and its render's state comes back
    with the plan: the next turn, prepared here, continues it."""
    model = served(QWEN3_TEMPLATE, SETTINGS)
    pool = Pool(1, 5, 30, SETTINGS)
    try:
        ask = agent_ask(turns=40)
        ask.prefix = Note(None, b"", [], [], [], ask.turns, None, None, None, [])
        there = await pool.prepare(False, ask, model, "function.parameters")
    finally:
        pool.close()
    assert there.render is not None and there.render.source is None  # identity stays here
    follow = agent_ask(turns=41)
    follow.prefix = Note(None, b"", [], [], [], follow.turns, None, there.render, None, [])
    here = prepare(follow, SETTINGS, model, "function.parameters")
    assert here.reused_iterations > 70
    assert here.prompt == prepare(agent_ask(turns=41), SETTINGS, model, "function.parameters").prompt


async def test_a_continued_render_stays_on_the_loop_and_goes_to_a_worker_when_it_cannot_continue() -> None:
    """A ``continued`` request (a long conversation whose render continues the last one) is
    prepared on the loop with its render bounded; when its render cannot keep to the bound — here
    there is no render to continue — it is prepared in a worker, with the same plan."""
    model = served(QWEN3_TEMPLATE, SETTINGS)
    pool = Pool(1, 5, 30, SETTINGS)
    try:
        first = agent_ask(turns=40)
        first.prefix = Note(None, b"", [], [], [], first.turns, None, None, None, [])
        whole = await pool.prepare(True, first, model, "function.parameters", 1024)  # nothing to continue
        assert pool._executor is not None  # (prepared in a worker: the pool started)
        assert first.prefix.resume.state is None and whole.render is not None  # its state came back
        follow = agent_ask(turns=41)
        follow.prefix = Note(None, b"", [], [], [], follow.turns, None, whole.render, None, [])
        pool.close()  # a worker now would fail the test: the next plan is made here
        here = await pool.prepare(True, follow, model, "function.parameters", CONTINUED_BYTES)
    finally:
        pool.close()
    assert here.reused_iterations > 70 and follow.prefix.resume.state is not None
    assert here.prompt == prepare(agent_ask(turns=41), SETTINGS, model, "function.parameters").prompt
    assert whole.prompt == prepare(agent_ask(turns=40), SETTINGS, model, "function.parameters").prompt


async def test_a_refusal_in_a_worker_is_the_refusal_inline() -> None:
    model = served(QWEN3_TEMPLATE, SETTINGS)
    ask = agent_ask(turns=3)
    ask.tools.append(Tool.function("tool_0", {"type": "object"}))  # two tools of one name
    with pytest.raises(APIError) as inline:
        prepare(ask, SETTINGS, model, "function.parameters")
    pool = Pool(1, 5, 30, SETTINGS)
    try:
        with pytest.raises(APIError) as there:
            await pool.prepare(False, ask, model, "function.parameters")
        assert await pool.run(None, same, 1) == 1  # the worker goes on
    finally:
        pool.close()
    assert (there.value.status, there.value.message, there.value.param) == (400, inline.value.message,
                                                                             inline.value.param)


async def test_a_jobs_own_error_reaches_the_caller(pool: Pool) -> None:
    with pytest.raises(APIError) as raised:
        await pool.run(None, refuse)
    assert (raised.value.status, raised.value.code) == (400, "no_such_thing")
    assert await pool.run(None, same, 1) == 1


# ----------------------------------------------------------------------------- failures and bounds


async def test_a_job_past_its_cpu_budget_is_a_400_and_the_worker_goes_on(pool: Pool) -> None:
    with pytest.raises(APIError) as raised:
        await pool.run(None, spin)
    assert raised.value.status == 400 and raised.value.code == "request_too_complex"
    assert await pool.run(None, same, "next") == "next"


async def test_past_the_queue_bound_a_job_is_a_503_to_retry(tmp_path: Path) -> None:
    pool = Pool(1, 30, 0.2, SETTINGS)
    hold = Hold(tmp_path)
    try:
        busy = hold.job(pool)
        await hold.running()  # the one worker is taken until the test lets it go
        with pytest.raises(APIError) as refused:
            await pool.run(None, same, 1)
        assert refused.value.status == 503 and refused.value.code == "server_busy"
        assert refused.value.headers["Retry-After"] == "1"
        await hold.let_go()
        assert await busy == 2
        assert await pool.run(None, same, "after") == "after"
    finally:
        pool.close()


async def test_a_burst_waits_its_turn_instead_of_503(tmp_path: Path) -> None:
    """Three times as many jobs as workers: all answered, in the order they came."""
    pool = Pool(2, 30, 60, SETTINGS)
    holds = [Hold(tmp_path, f"h{k}") for k in range(6)]
    try:
        jobs = [hold.job(pool) for hold in holds]
        for hold in holds:  # each in turn, as workers free up
            await hold.running()
            await hold.let_go()
        assert await asyncio.gather(*jobs) == [2] * 6
    finally:
        pool.close()


async def test_a_job_whose_client_left_still_ends_and_frees_its_worker(tmp_path: Path) -> None:
    pool = Pool(1, 30, 30, SETTINGS)
    hold = Hold(tmp_path)
    try:
        left = hold.job(pool)
        await hold.running()
        left.cancel()
        queued = asyncio.ensure_future(pool.run(None, same, "after"))
        await asyncio.sleep(0)
        assert not queued.done()  # the job still holds the worker …
        await hold.let_go()
        assert await queued == "after"  # … until it ends
    finally:
        pool.close()


async def test_a_worker_killed_mid_job_runs_the_job_again_then_503(tmp_path: Path) -> None:
    """A worker lost before it answered costs nobody an error: the job runs again on a fresh one;
    lost twice, the job is a 503 to retry (never a 500)."""
    pool = Pool(1, 30, 30, SETTINGS)
    hold = Hold(tmp_path)
    try:
        job = hold.job(pool)
        os.kill(await hold.running(), signal.SIGKILL)
        second = await hold.running()  # again, on a fresh worker
        await hold.let_go()
        assert await job == 2
        assert second in pool.workers()
        twice = hold.job(pool)
        os.kill(await hold.running(), signal.SIGKILL)
        os.kill(await hold.running(), signal.SIGKILL)
        with pytest.raises(APIError) as lost:
            await twice
        assert lost.value.status == 503 and lost.value.headers["Retry-After"] == "1"
        assert await pool.run(None, same, "after") == "after"
    finally:
        pool.close()


def _zombies() -> list[int]:
    """This process's children that are zombies."""
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] == "Z" and int(fields[1]) == os.getpid():
                found.append(int(pid))
    return found


async def test_a_dead_fork_server_is_replaced_and_reaped(pool: Pool) -> None:
    from multiprocessing import forkserver

    assert await pool.run(None, same, 1) == 1
    server = forkserver._forkserver._forkserver_pid  # type: ignore[attr-defined]
    assert server is not None
    ended = os.pidfd_open(server)
    os.kill(server, signal.SIGKILL)
    try:  # the kill is delivered when the kernel gets to it: the fork server has ended once its pidfd reads
        assert select.select([ended], [], [], 30)[0], "the fork server did not end"
    finally:
        os.close(ended)
    for worker in pool.workers():  # the pool needs a new worker: it asks the fork server, which is gone
        os.kill(worker, signal.SIGKILL)
    assert await pool.run(None, same, 2) == 2
    assert forkserver._forkserver._forkserver_pid != server  # type: ignore[attr-defined]
    assert server not in _zombies()


async def test_a_fork_server_refusing_new_workers_costs_a_retry_not_an_error(pool: Pool,
                                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A fork server that died and was not yet reaped refuses the connection a new worker needs: the
    job runs again on a fresh pool, as for a lost worker."""
    assert await pool.run(None, same, 1) == 1
    executor = pool._executor
    assert executor is not None

    def refused(*_args: Any, **_kwargs: Any) -> Any:
        raise ConnectionRefusedError(111, "Connection refused")

    monkeypatch.setattr(executor, "submit", refused)
    assert await pool.run(None, same, 2) == 2
    assert pool._executor is not executor


async def test_the_pools_private_table_is_what_we_rely_on() -> None:
    """``ProcessPoolExecutor._processes`` (pid → ``multiprocessing.Process``) is how workers are
    stopped before Python 3.14's ``kill_workers``: this fails when the standard library moves it."""
    import multiprocessing

    executor = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("forkserver"))
    try:
        assert executor.submit(int).result(30) == 0
        processes = _processes(executor)
        assert len(processes) == 1 and processes[0].is_alive() and callable(processes[0].kill)
        assert isinstance(executor._processes, dict)  # type: ignore[attr-defined]
    finally:
        executor.shutdown(wait=True)


# ----------------------------------------------------------------------------- light or heavy


def test_small_requests_are_light_and_large_ones_heavy() -> None:
    assert is_light(agent_ask(turns=3))
    assert not is_light(agent_ask(turns=40))  # 82 messages
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
    weighed by what is new in it when there is a render to continue — light up to
    ``KNOWN_LIGHT_CHARS`` of conversation in all, ``continued`` (its render bounded on the loop)
    past it."""
    ask = agent_ask(turns=100)
    assert not is_light(ask)
    assert is_light(reusing(ask, len(ask.turns) - 2))
    assert not is_light(reusing(ask, 2))  # most of it new
    assert not is_light(reusing(ask, len(ask.turns) - 2, rendered=False))  # nothing to continue: rendered whole
    big = agent_ask(turns=100)
    big.turns[5].text = "x" * KNOWN_LIGHT_CHARS
    assert weight(reusing(big, len(big.turns) - 2)) == "continued"  # on the loop, its render bounded
    assert weight(reusing(big, len(big.turns) - 2, rendered=False)) == "heavy"


def test_a_continued_turn_is_weighed_by_what_is_new_not_by_its_checked_tools() -> None:
    """A file read of 20 KB as the new turn's result, with 16 KB of tools whose schemas were checked
    before: the render continues on the loop (in a worker it would render the whole conversation)."""
    ask = agent_ask(turns=100)
    ask.tools.extend(Tool.function(f"more_{k}", {"type": "object", "properties": {
        "p": {"type": "string", "description": "d" * 1000}}}) for k in range(16))
    ask.turns[-1].text = "r" * 20_000
    prepare(ask, SETTINGS, served(QWEN3_TEMPLATE, SETTINGS), "function.parameters")  # (its schemas checked)
    assert weight(ask) == "heavy"  # nothing decoded before: all of it weighs
    assert weight(reusing(ask, len(ask.turns) - 2)) == "light"


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
