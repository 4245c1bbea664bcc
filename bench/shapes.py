"""Section: an agent's next turn on every face and in every shape (issue 35) — toolwire's CPU per
turn, its whole process tree (prepare workers included), with the prefix cache on and off, and
before and after this branch, side by side in one run.

One conversation per shape grows from turn 0 to turn ``TURNS``: a ~12 KB system prompt, 12 tools
with ~1.5 KB schemas, one call per turn with mixed-type arguments (strings, integers, booleans) and
a ~1 KB tool result; Qwen3's template, ``--reasoning-parser qwen3 --tool-call-parser qwen25``,
streaming. The shapes (``SHAPES``):

* **chat append** — each Chat Completions request is the last one plus the call and its result;
* **chat trailing** — the same, ending in a user message the client rewrites every turn (a
  reminder, a scratch message);
* **chat early edit** — the same, with the first user message (a repo map) edited every turn;
* **chat reads** — the append shape with every other tool result a file the agent read (~16 KB):
  a conversation of ~1.2 MB by turn 100, as a coding agent's grows;
* **messages** — Claude Code's shape on ``/v1/messages``: system blocks with ``cache_control`` (and
  the billing line), ``tool_use`` blocks with object inputs, each ``tool_result`` in a user message
  with a ``<system-reminder>`` text block, ``cache_control`` on the newest message's last block;
* **responses whole** — Codex's shape: ``store: false``, the whole input every turn, the server's
  own output items (sealed reasoning, the call) handed back with the call's output;
* **responses chain** — the Agents SDK's default: ``store: true``, ``previous_response_id`` and
  only the new input (the call's output);
* **conversation** — ``/v1/responses`` with a ``conversation``: only the new input each turn;
* **unique** — every request a conversation never seen before, as long as the append shape's at
  the same turn: the same system prompt and tools, every other message its own (a batch of
  one-off requests). Nothing can be reused: the service must cost nothing (on ÷ off).

Every build × cache setting is its own ``toolwire serve`` (one uvicorn worker, two prepare
workers, its own store and its own scripted backend recording each prompt's digest); each turn
goes to all of them in turn (the order rotating), so machine noise falls on all alike. The CPU of
turns ``FROM``–``TURNS`` is read from ``/proc`` for the server's process and every descendant
(``tree_cpu``), divided by the number of turns. Prompts are compared turn by turn across every
server: they must be byte-identical (a cache never changes a prompt). The servers share one
``--thinking-secret`` so the sealed reasoning a client hands back is valid on each.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench.agent import agent_tools, system_prompt
from bench.cpu import tree_cpu
from bench.proxy import Proc, answers, free_port
from bench.report import Section, at_most, fmt, table

TITLE = "An agent's next turn, every face and shape: CPU per turn, prefix cache on and off"
ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = ROOT / "tests" / "data" / "templates" / "Qwen-Qwen3-0.6B.jinja"
#: the build before issue 35: the main the issue measured (override: BENCH_SHAPES_BEFORE; empty: this tree only)
BEFORE = "c640f5c"
TURNS = 100
FROM = 73
#: the turns whose CPU is the floor: what a turn of a short conversation (5–10 turns) costs — the
#: request, the backend's stream and its parse, whatever the conversation's length — past the
#: first turns' one-time costs (the first schema checks in each process, each process's first
#: render of the template and its resumable proof), which land on turns 0–4 as the prefix
#: service's admission has it (a conversation is kept from its second sighting: ``app.prefix``)
FLOOR = (5, 10)
TARGET_MS = 3.0
#: the issue's figure for its reference, on its machine: the build before's append turn, cache on (ms)
REFERENCE_MS = 2.9
#: the server that grows that reference beside each other shape
REFERENCE = "reference"
EDIT_RATIO = 1.1  # the early-edit shape with the cache on ÷ off
MISS_RATIO = 1.1  # the unique shape (every request a miss) with the cache on ÷ off: no dearer, within noise
SECRET = "bench-shapes-thinking-secret-0123456789"

# ---------------------------------------------------------------------------- the conversation

_NAMES = ("bash", "read_file", "write_file", "edit_file", "glob", "grep", "list_dir", "web_fetch", "todo_write",
          "run_tests", "git_diff", "ask_user")
_RESULT = ("src/app/module_{k}.py:{line}: def handler_{k}(request: Request) -> Response:  # «café» {k}\n"
           "src/app/module_{k}.py:{line2}:     return Response(status=200, body=b\"ok\\n\")\n")


def arguments(i: int) -> dict[str, Any]:
    """Turn ``i``'s call: strings, integers, booleans, a list and an object."""
    return {"path": f"/repo/src/app/module_{i}.py", "line": 10 + i, "limit": 200, "recursive": i % 2 == 0,
            "dry_run": False, "patterns": [f"src/app/**/*_{i}.py", "tests/**/*.py"],
            "options": {"timeout_ms": 120000, "verbose": True, "env": {"LANG": "C.UTF-8"}}}


def result(i: int) -> str:
    """Turn ``i``'s tool result (~1 KB)."""
    return "".join(_RESULT.format(k=i * 10 + j, line=j * 7 + 1, line2=j * 7 + 2) for j in range(7))


def file_read(i: int) -> str:
    """Turn ``i``'s tool result in the reads shape: every other one a file the agent read (~16 KB)."""
    return result(i) * 16 if i % 2 else result(i)


def call_id(i: int) -> str:
    return f"call_{i:04d}_{'x' * 16}"


TASK = "The test suite fails in src/app: find out why and fix it. Run the tests after."


def repo_map(t: int) -> str:
    """The first user message of the early-edit shape: a repo map that changes every turn."""
    lines = [f"src/app/module_{k}.py: handler_{k} (edited turn {t - k % 3})" for k in range(40)]
    return "Repository map:\n" + "\n".join(lines) + "\n\n" + TASK


def reminder(t: int) -> str:
    return (f"<system-reminder>Turn {t}. {1000 - t} steps of budget left; the todo list has {t % 7} open items. "
            "Keep going.</system-reminder>")


def chat_turn(i: int, reads: bool = False) -> list[dict[str, Any]]:
    return [{"role": "assistant", "content": f"Step {i}: looking at module_{i} next.",
             "reasoning_content": f"The failing test points at module_{i}; read it before editing anything.",
             "tool_calls": [{"id": call_id(i), "type": "function",
                             "function": {"name": _NAMES[i % 12], "arguments": json.dumps(arguments(i))}}]},
            {"role": "tool", "tool_call_id": call_id(i), "content": file_read(i) if reads else result(i)}]


def chat_body(t: int, shape: str) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": system_prompt()},
                                      {"role": "user", "content": repo_map(t) if shape == "early" else TASK}]
    for i in range(t):
        messages += chat_turn(i, shape == "reads")
    if shape == "trailing":
        messages.append({"role": "user", "content": reminder(t)})
    return {"model": "m", "messages": messages, "tools": agent_tools(), "stream": True, "max_tokens": 256}


def unique_body(t: int) -> dict[str, Any]:
    """A conversation never seen before, as long as ``chat_body(t, "append")``: its system prompt and
    tools, every other message marked as request ``t``'s own."""
    body = chat_body(t, "append")
    for message in body["messages"][1:]:
        if isinstance(message.get("content"), str):
            message["content"] = f"[request {t}] {message['content']}"
    return body


def anthropic_tools() -> list[dict[str, Any]]:
    return [{"name": t["function"]["name"], "description": t["function"]["description"],
             "input_schema": t["function"]["parameters"]} for t in agent_tools()]


def messages_body(t: int) -> dict[str, Any]:
    """Claude Code's request at turn ``t``."""
    ephemeral = {"type": "ephemeral"}
    first: list[dict[str, Any]] = [{"type": "text", "text": reminder(0)}, {"type": "text", "text": TASK}]
    messages: list[dict[str, Any]] = [{"role": "user", "content": first}]
    for i in range(t):
        messages.append({"role": "assistant", "content": [
            {"type": "text", "text": f"Step {i}: looking at module_{i} next."},
            {"type": "tool_use", "id": f"toolu_{i:04d}{'y' * 16}", "name": _NAMES[i % 12], "input": arguments(i)}]})
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": f"toolu_{i:04d}{'y' * 16}", "content": result(i)},
            {"type": "text", "text": reminder(i + 1)}]})
    last = messages[-1]["content"][-1]
    messages[-1]["content"][-1] = {**last, "cache_control": ephemeral}  # Claude Code marks the newest block
    system = [{"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.330.abc; cc_entrypoint=cli;"},
              {"type": "text", "text": system_prompt(), "cache_control": ephemeral}]
    return {"model": "m", "max_tokens": 32000, "stream": True, "system": system, "messages": messages,
            "tools": anthropic_tools(), "thinking": {"type": "adaptive", "display": "omitted"},
            "metadata": {"user_id": "bench"}}


def responses_tools() -> list[dict[str, Any]]:
    return [{"type": "function", "name": t["function"]["name"], "description": t["function"]["description"],
             "parameters": t["function"]["parameters"], "strict": False} for t in agent_tools()]


def completion_text() -> str:
    """What the scripted backend answers every turn: reasoning, then one call (mixed-type arguments)."""
    args = json.dumps(arguments(7))
    return ("<think>\nThe test imports module_7; read it next.\n</think>\n\n"
            f'<tool_call>\n{{"name": "read_file", "arguments": {args}}}\n</tool_call>')


# ---------------------------------------------------------------------------- the shapes


@dataclass
class Client:
    """One shape's client talking to one server: what it has said and been told so far."""

    shape: str
    url: str
    items: list[dict[str, Any]] = field(default_factory=list)  # responses whole: the input so far
    previous: str | None = None  # responses chain: the last response's id
    last_call: str | None = None  # the call the last answer made
    conversation: str | None = None

    def body(self, t: int) -> tuple[str, dict[str, Any]]:
        if self.shape in ("append", "trailing", "early", "reads"):
            return "/v1/chat/completions", chat_body(t, self.shape)
        if self.shape == "unique":
            return "/v1/chat/completions", unique_body(t)
        if self.shape == "messages":
            return "/v1/messages", messages_body(t)
        head: dict[str, Any] = {"model": "m", "instructions": system_prompt(), "tools": responses_tools(),
                                "stream": True, "max_output_tokens": 256, "parallel_tool_calls": True,
                                "tool_choice": "auto"}
        new: list[dict[str, Any]] = []
        if t == 0:
            new = [{"type": "message", "role": "developer", "content": [{"type": "input_text",
                                                                        "text": "Sandbox: workspace-write."}]},
                   {"type": "message", "role": "user", "content": [{"type": "input_text", "text": TASK}]}]
        elif self.last_call is not None:
            new = [{"type": "function_call_output", "call_id": self.last_call, "output": result(t - 1)}]
        if self.shape == "whole":
            self.items += new
            return "/v1/responses", {**head, "store": False, "input": self.items,
                                     "include": ["reasoning.encrypted_content"],
                                     "reasoning": {"effort": "medium", "summary": "auto"}}
        if self.shape == "chain":
            extra = {"previous_response_id": self.previous} if self.previous else {}
            return "/v1/responses", {**head, "store": True, "input": new, **extra}
        assert self.shape == "conversation"
        return "/v1/responses", {**head, "store": True, "input": new, "conversation": self.conversation}

    def heard(self, events: list[dict[str, Any]]) -> None:
        """The answer's events: what the next request builds on."""
        for event in events:
            if event.get("type") != "response.completed":
                continue
            response = event["response"]
            self.previous = response["id"]
            output = response["output"]
            calls = [item["call_id"] for item in output if item.get("type") == "function_call"]
            self.last_call = calls[-1] if calls else None
            if self.shape == "whole":
                self.items += output


def sse_payloads(raw: bytes) -> list[dict[str, Any]]:
    out = []
    for line in raw.split(b"\n"):
        if line.startswith(b"data: ") and line != b"data: [DONE]":
            try:
                out.append(json.loads(line[6:]))
            except ValueError:
                pass
    return out


SHAPES: dict[str, str] = {
    "append": "Chat: each request = the last one + the call + its result",
    "trailing": "Chat: a trailing user message re-written every turn",
    "early": "Chat: an early message (a repo map) edited every turn",
    "reads": "Chat: the append shape, every other result a file read (~16 KB)",
    "messages": "Messages: Claude Code's shape",
    "whole": "Responses: store false, the whole input every turn (Codex)",
    "chain": "Responses: store true + previous_response_id, only the new input (Agents SDK)",
    "conversation": "Responses: a conversation, only the new input",
    "unique": "Chat: every request a conversation never seen (one-off requests)",
}


# ---------------------------------------------------------------------------- processes


@dataclass
class Server:
    """One ``toolwire serve`` (a build, the cache on or off) and its own scripted backend."""

    name: str
    tree: Path
    cache: bool
    backend: Proc
    process: subprocess.Popen[bytes]
    url: str
    cpu: dict[str, float] = field(default_factory=dict)  # shape → CPU seconds over the measured turns
    #: the shape this server is asked in whatever shape is run (the reference: always append)
    shape: str | None = None

    def prompts(self) -> list[str]:
        return list(httpx.get(self.backend.url + "/bench/prompts", timeout=30).json())

    def stop(self) -> None:
        Proc(self.process, 0).stop()  # type: ignore[arg-type]  # (a bytes pipe: stopped alike)
        self.backend.stop()


def cache_off_flags(tree: Path) -> list[str]:
    """The flag that turns the prefix cache off in ``tree``'s build."""
    source = (tree / "app" / "settings.py").read_text(encoding="utf-8")
    return ["--prefix-cache-bytes", "0"] if "prefix_cache_bytes" in source else ["--render-cache-bytes", "0"]


def start_server(name: str, tree: Path, cache: bool, tokens: list[str], workdir: Path,
                 shape: str | None = None) -> Server:
    backend = start_listener_backend(tokens, workdir / name)
    port = free_port()
    state = workdir / name / "state"
    shutil.rmtree(state, ignore_errors=True)  # a fresh store each run, as a new deployment's: what runs before left
    state.mkdir(parents=True)  # (tens of MB of other builds' responses) would weigh on this run's writes
    cmd = [sys.executable, "-m", "app.cli", "serve", "--backend", backend.url, "--backend-type", "vllm", "--port",
           str(port), "--chat-template", str(TEMPLATE), "--tool-call-parser", "qwen25", "--reasoning-parser",
           "qwen3", "--log-level", "error", "--retries", "0", "--state-dir", str(state)]
    if not cache:
        cmd += cache_off_flags(tree)
    env = {**os.environ, "PYTHONPATH": str(tree), "TOOLWIRE_THINKING_SECRET": SECRET}
    process = subprocess.Popen(cmd, cwd=tree, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    url = f"http://127.0.0.1:{port}"
    if answers(url + "/v1/models"):
        return Server(name, tree, cache, backend, process, url, shape=shape)
    process.kill()
    backend.stop()
    raise RuntimeError(f"toolwire {name} did not start")


def start_listener_backend(tokens: list[str], workdir: Path) -> Proc:
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / "completion-tokens.json"
    path.write_text(json.dumps(tokens, ensure_ascii=False))
    from bench.proxy import start_listener

    return start_listener(["bench.backend", "--tokens", str(path), "--record"], "scripted backend")


def tokens_of(text: str, size: int = 4) -> list[str]:
    return [text[i:i + size] for i in range(0, len(text), size)]


# ---------------------------------------------------------------------------- one shape


def run_shape(shape: str, servers: list[Server], turns: int, first: int,
              log: Callable[[str], None]) -> dict[str, Any]:
    """Grow one conversation of ``shape`` on every server; CPU per measured turn and prompt checks."""
    clients = {s.name: Client(s.shape or shape, s.url) for s in servers}
    http = httpx.Client(timeout=300)
    if shape == "conversation":
        for s in servers:
            if s.shape is not None:
                continue
            made = http.post(s.url + "/v1/conversations", json={"items": []})
            made.raise_for_status()
            clients[s.name].conversation = made.json()["id"]
    for s in servers:
        s.prompts()  # forget what came before
    start_cpu: dict[str, float] = {}
    floor_cpu: dict[str, float] = {}
    statuses: dict[str, dict[int, int]] = {s.name: {} for s in servers}
    try:
        for t in range(turns + 1):
            order = servers[t % len(servers):] + servers[:t % len(servers)]
            for s in order:
                if t == first:
                    start_cpu[s.name] = tree_cpu(s.process.pid)
                if t in (FLOOR[0], FLOOR[1] + 1):  # the floor: the same turns of a short conversation
                    floor_cpu[s.name] = tree_cpu(s.process.pid) - floor_cpu.get(s.name, 0.0)
                client = clients[s.name]
                path, body = client.body(t)
                raw = bytearray()
                with http.stream("POST", s.url + path, json=body) as response:
                    for chunk in response.iter_bytes():
                        raw += chunk
                    counts = statuses[s.name]
                    counts[response.status_code] = counts.get(response.status_code, 0) + 1
                if response.status_code != 200:
                    raise RuntimeError(f"{shape} turn {t} on {s.name}: {response.status_code} {bytes(raw)[:300]!r}")
                client.heard(sse_payloads(bytes(raw)))
            if t % 25 == 0:
                log(f"shapes: {shape} turn {t}/{turns}")
        cpu = {s.name: (tree_cpu(s.process.pid) - start_cpu[s.name]) / (turns - first + 1) * 1000 for s in servers}
        floor = {name: spent / (FLOOR[1] - FLOOR[0] + 1) * 1000 for name, spent in floor_cpu.items()}
    finally:
        http.close()
    prompts = {s.name: s.prompts() for s in servers if s.shape is None}  # the reference grew its own
    reference = prompts[servers[0].name]
    differing = {name: sum(a != b for a, b in zip(reference, got, strict=False)) + abs(len(reference) - len(got))
                 for name, got in prompts.items()}
    return {"cpu_ms": cpu, "floor_ms": floor, "prompt_differences": differing, "turns": len(reference)}


# ---------------------------------------------------------------------------- the section


def builds(ctx: Any) -> dict[str, Path]:
    from bench.offload import before_tree

    found = {"after": ROOT}
    commit = os.environ.get("BENCH_SHAPES_BEFORE", BEFORE)
    if commit:
        tree = before_tree(ctx.out / "shapes", commit)
        if tree is not None:
            found["before"] = tree
    return found


def load_average() -> str:
    try:
        return " / ".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        return "?"


def run(ctx: Any) -> Section:
    section = Section("shapes", TITLE)
    turns = int(os.environ.get("BENCH_SHAPES_TURNS", "40" if ctx.quick else str(TURNS)))
    first = max(1, turns - (TURNS - FROM))
    wanted = [s for s in os.environ.get("BENCH_SHAPES", ",".join(SHAPES)).split(",") if s]
    tokens = tokens_of(completion_text())
    found = builds(ctx)
    #: the reference is the issue's only when the build before is the one it measured
    referenced = "before" in found and os.environ.get("BENCH_SHAPES_BEFORE", BEFORE) == BEFORE
    results: dict[str, dict[str, Any]] = {}
    loads: list[str] = [load_average()]
    for shape in wanted:
        servers = []
        try:
            for build, tree in found.items():
                for cache in (True, False):
                    name = f"{build} {'on' if cache else 'off'}"
                    servers.append(start_server(name, tree, cache, tokens, ctx.out / "shapes" / shape))
            if referenced and shape != "append":  # the reference, turn by turn beside this shape
                servers.append(start_server(REFERENCE, found["before"], True, tokens, ctx.out / "shapes" / shape,
                                            shape="append"))
            results[shape] = run_shape(shape, servers, turns, first, ctx.log)
        except Exception as exc:  # noqa: BLE001 — one shape failing does not hide the others
            ctx.log(f"shapes: {shape} failed: {exc}")
            results[shape] = {"error": str(exc)}
        finally:
            for s in servers:
                s.stop()
        loads.append(load_average())
    names = [f"{b} {c}" for b in found for c in ("on", "off")]
    rows = []
    for shape in wanted:
        got = results[shape]
        if "error" in got:
            rows.append((SHAPES[shape], *(["failed"] * (len(names) + referenced)), got["error"][:80]))
            continue
        cpu = got["cpu_ms"]
        floor = got.get("floor_ms", {})
        reference = cpu.get(REFERENCE, cpu.get("before on") if shape == "append" else None) if referenced else None
        over = [fmt(cpu["after on"] / reference) if reference and "after on" in cpu else "—"] if referenced else []
        rows.append((SHAPES[shape], *(f"{fmt(cpu.get(n))} ({fmt(floor.get(n), 1)})" for n in names), *over,
                     "identical" if not any(got["prompt_differences"].values()) else
                     f"DIFFER {got['prompt_differences']}"))
        section.figure(f"shapes.{shape}.on_ms", f"after, cache on: {SHAPES[shape]}", cpu.get("after on"), "ms",
                       at_most(TARGET_MS) if shape != "unique" else None, f"cache off {fmt(cpu.get('after off'))} ms; before: on "
                       f"{fmt(cpu.get('before on'))}, off {fmt(cpu.get('before off'))} ms")
        if reference and cpu.get("after on") is not None:
            ratio = cpu["after on"] / reference
            section.figure(f"shapes.{shape}.over_reference", f"after, cache on ÷ the reference turn: {SHAPES[shape]}",
                           ratio, "×", at_most(TARGET_MS / REFERENCE_MS) if shape != "unique" else None,
                           f"the reference (before on, append shape, beside it turn by turn) "
                           f"{fmt(reference)} ms here; × {REFERENCE_MS} ms = {fmt(ratio * REFERENCE_MS)} ms "
                           "on the issue's machine")
        section.figure(f"shapes.{shape}.prompts_differing", f"prompts differing across servers: {shape}",
                       float(sum(got["prompt_differences"].values())), "", at_most(0))
    early = results.get("early", {}).get("cpu_ms")
    if early:
        section.figure("shapes.early.on_over_off", "after: early edit, cache on ÷ cache off",
                       early["after on"] / early["after off"], "×", at_most(EDIT_RATIO))
    unique = results.get("unique", {}).get("cpu_ms")
    if unique:
        section.figure("shapes.unique.on_over_off", "after: every request a miss, cache on ÷ cache off",
                       unique["after on"] / unique["after off"], "×", at_most(MISS_RATIO))
    over_column = ["after on ÷ reference"] if referenced else []
    section.tables.append(table(("shape", *(f"{n}, ms CPU/turn (floor)" for n in names), *over_column, "prompts"),
                                rows))
    section.notes.append(
        f"Turns {first}–{turns} of one conversation per shape grown from turn 0; CPU of toolwire's process tree "
        "(server and prepare workers) per turn. In brackets the floor: the same server's CPU per turn over turns "
        f"{FLOOR[0]}–{FLOOR[1]} of the same conversation (a short one: the request, the backend's stream and its "
        "parse, which no cache can spare). Every server answered every turn, the order rotating each turn. "
        f"Load average (1/5/15 min) before and after each shape: {'; '.join(loads)}. 'before' = "
        f"{os.environ.get('BENCH_SHAPES_BEFORE', BEFORE)} (the cache off there is `--render-cache-bytes 0`). "
        "'reference': the issue's measure of reach — the build before's append turn with the cache on, which the "
        f"issue measured at {REFERENCE_MS} ms on its machine; in every shape's run a server of that build grows an "
        "append conversation beside the shape's, turn by turn, so the ratio holds however this machine's speed "
        f"moves; goal 1 (every shape ≤ {TARGET_MS} ms there) is a ratio ≤ {fmt(TARGET_MS / REFERENCE_MS)} here.")
    section.data = results
    return section
