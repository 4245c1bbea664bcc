"""Agent-sized requests (issue 26): what a coding agent sends every turn — a ~12 KB system prompt, a
dozen tools with ~1.5 KB schemas, and every earlier turn with its call and result.

``agent_request(turns)`` is one Chat Completions body: system, the user's task, then ``turns``
finished turns (an assistant turn with a short text, its reasoning and one call; the tool's result),
so the conversation ends in a tool result and the model is asked for its next step. The content is
deterministic and code-like (paths, shell output, diffs); the same ``turns`` always gives the same
bytes, and ``agent_request(n)``'s messages are a prefix of ``agent_request(n + 1)``'s — one growing
conversation, as an agent sends it.

Only the standard library (the SMG harness and other venvs import it too).
"""

from __future__ import annotations

import json
from typing import Any

SYSTEM_BYTES = 12_288
TOOL_COUNT = 12
TOOL_SCHEMA_BYTES = 1_536
TURNS = (0, 40, 100)

_RULE = ("- {n}. When you change code, read the surrounding file first, keep the project's style, and run the "
         "tests that cover it; never invent an API — look it up in the repository (`grep -rn`, `git log -S`). "
         "Report what you changed and why, in the user's language (ü, é, 日本語 are fine).\n")


def system_prompt(size: int = SYSTEM_BYTES) -> str:
    """An agent's system prompt of about ``size`` bytes: a preamble and numbered rules."""
    head = ("You are a coding agent working in the user's repository. You have tools to read, search, edit and "
            "run things; use them instead of guessing. Be brief.\n\n# Rules\n")
    parts = [head]
    n, total = 1, len(head.encode())
    while total < size:
        rule = _RULE.format(n=n)
        parts.append(rule)
        total += len(rule.encode())
        n += 1
    return "".join(parts)


_NAMES = ("bash", "read_file", "write_file", "edit_file", "glob", "grep", "list_dir", "web_fetch", "todo_write",
          "run_tests", "git_diff", "ask_user")


def _tool(name: str, size: int) -> dict[str, Any]:
    """A function tool whose JSON schema is about ``size`` bytes (described properties, an enum, a
    nested object, an array)."""
    props: dict[str, Any] = {
        "path": {"type": "string", "description": f"Absolute path the {name} tool works on; must exist."},
        "mode": {"type": "string", "enum": ["fast", "careful", "dry_run"], "description": "How to run."},
        "options": {"type": "object", "description": "Fine-tuning.", "properties": {
            "timeout_ms": {"type": "integer", "minimum": 1, "maximum": 600000, "description": "Give up after."},
            "env": {"type": "object", "additionalProperties": {"type": "string"}, "description": "Extra env."}},
            "additionalProperties": False},
        "patterns": {"type": "array", "items": {"type": "string"}, "description": "Globs to include."},
    }
    k = 0
    while len(json.dumps(props)) < size - 120:
        props[f"flag_{k}"] = {"type": "boolean", "description": f"Switch {k} of {name}: see the tool's manual page."}
        k += 1
    return {"type": "function", "function": {
        "name": name, "description": f"The {name} tool. Use it when the task needs it; prefer it to bash.",
        "parameters": {"type": "object", "properties": props, "required": ["path"], "additionalProperties": False}}}


def agent_tools(count: int = TOOL_COUNT, size: int = TOOL_SCHEMA_BYTES) -> list[dict[str, Any]]:
    return [_tool(_NAMES[i % len(_NAMES)] + ("" if i < len(_NAMES) else f"_{i}"), size) for i in range(count)]


_OUTPUT = ("src/app/module_{k}.py:{line}: def handler_{k}(request: Request) -> Response:  # «café» {k}\n"
           "src/app/module_{k}.py:{line2}:     return Response(status=200, body=b\"ok\\n\")\n")


def _turn(i: int) -> list[dict[str, Any]]:
    """Finished turn ``i``: the assistant's call and the tool's result (~1.5 KB together)."""
    call_id = f"call_{i:04d}_{'x' * 16}"
    args = {"path": f"/repo/src/app/module_{i}.py", "mode": "careful",
            "patterns": [f"src/app/**/*_{i}.py", "tests/**/*.py"],
            "options": {"timeout_ms": 120000, "env": {"PYTHONPATH": "/repo/src", "LANG": "C.UTF-8"}}}
    output = "".join(_OUTPUT.format(k=i * 10 + j, line=j * 7 + 1, line2=j * 7 + 2) for j in range(8))
    return [
        {"role": "assistant", "content": f"Step {i}: looking at module_{i} next.",
         "reasoning_content": f"The failing test points at module_{i}; read it before editing anything.",
         "tool_calls": [{"id": call_id, "type": "function",
                         "function": {"name": _NAMES[i % len(_NAMES)], "arguments": json.dumps(args)}}]},
        {"role": "tool", "tool_call_id": call_id, "content": output},
    ]


def agent_messages(turns: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": system_prompt()},
        {"role": "user", "content": "The test suite fails in src/app: find out why and fix it. Run the tests after."},
    ]
    for i in range(turns):
        messages.extend(_turn(i))
    return messages


def agent_request(turns: int, stream: bool = True, max_tokens: int = 64) -> dict[str, Any]:
    """The Chat Completions body of an agent's request with ``turns`` finished turns."""
    return {"model": "bench-model", "messages": agent_messages(turns), "tools": agent_tools(), "stream": stream,
            "max_tokens": max_tokens}


# ------------------------------------------------------------------------------ the section

TITLE = "Agent-sized turns (issue 26): toolwire's CPU before the backend is asked"
TEMPLATE = "tests/data/templates/Qwen-Qwen3-0.6B.jinja"
NEXT_TURN_TARGET_MS = 3.0  # at 100 turns, on a quiet core


def _before_backend(raw: bytes, template: Any, formats: Any, backend: Any, settings: Any,
                    prefix: Any) -> tuple[float, str]:
    """CPU seconds from the request body to the backend's request body (the in-process path a chat
    request takes: JSON, validation, the shared Ask, limits and schemas, render and plan, parsers,
    the backend body), and the prompt; what the request leaves is kept in ``prefix`` (as the server
    does once the backend was asked: counted here too)."""
    import time

    import orjson

    from app.api.chat.decode import chat_ask
    from app.api.chat.parse import parse_request
    from app.jsontext import dumps_body
    from app.pipeline.offload import is_light
    from app.pipeline.plan import plan_request
    from app.pipeline.validate import check_ask
    from app.prefix import keep_after

    start = time.process_time()
    request = parse_request(orjson.loads(raw), settings, "", prefix)
    ask = chat_ask(request)
    is_light(ask)  # (a heavy request is planned by a worker in the server: here, inline all the same)
    check_ask(ask, settings)
    plan = plan_request(ask, formats, template, backend, settings.max_calls_per_answer)
    keep_after(ask.prefix)
    plan.parser()
    dumps_body(backend.dialect.body(plan.generation_request(), backend.model))
    return time.process_time() - start, plan.prompt


def measure(reps: int = 7) -> dict[int, dict[str, float]]:
    """Per turn count: the best of ``reps`` CPU times (ms) for a first request (no cache) and for
    the next turn of a conversation whose previous turn was just served (cache warm)."""
    from pathlib import Path

    import httpx
    import orjson

    from app.backends import Backend
    from app.backends.vllm import Vllm
    from app.formats import Formats
    from app.parser_choice import ParserChoice
    from app.prefix import PrefixService
    from app.settings import Settings
    from app.templates.chat_template import ChatTemplate
    from app.templates.prompt import profile_of
    from parsers.registry import canonical_reasoning_parser, canonical_tool_parser

    path = Path(__file__).resolve().parent.parent / TEMPLATE
    formats = Formats.of(ParserChoice(reasoning=canonical_reasoning_parser("qwen3"),
                                      tools=canonical_tool_parser("hermes")))
    backend = Backend("http://127.0.0.1:9", httpx.AsyncClient(), dialect=Vllm())
    settings = Settings(backend="http://127.0.0.1:9")
    out: dict[int, dict[str, float]] = {}
    for turns in TURNS:
        raw = orjson.dumps(agent_request(turns))
        before = orjson.dumps(agent_request(max(0, turns - 1)))
        cold_best = warm_best = float("inf")
        for _ in range(reps):
            cold = ChatTemplate.load(path)
            profile_of(cold)  # probed at start-up in the server
            cold_s, whole = _before_backend(raw, cold, formats, backend, settings, PrefixService(0))
            warm = ChatTemplate.load(path)
            profile_of(warm)
            prefix = PrefixService(64 << 20)
            _before_backend(before, warm, formats, backend, settings, prefix)
            warm_s, resumed = _before_backend(raw, warm, formats, backend, settings, prefix)
            if resumed != whole:
                raise AssertionError(f"resumed prompt differs from the whole render at {turns} turns")
            cold_best, warm_best = min(cold_best, cold_s), min(warm_best, warm_s)
        out[turns] = {"bytes": len(raw), "prompt_chars": len(whole), "first_ms": cold_best * 1e3,
                      "next_ms": warm_best * 1e3}
    return out


def run(ctx: Any) -> Any:
    from bench.report import Section, at_most, fmt, table

    section = Section(__name__, TITLE)
    data = measure(3 if ctx.quick else 15)
    last = data[TURNS[-1]]
    section.figure("agent.next_turn_ms.100", f"CPU before the backend is asked, next turn at {TURNS[-1]} turns",
                   last["next_ms"], "ms", at_most(NEXT_TURN_TARGET_MS),
                   f"first request {fmt(last['first_ms'])} ms; a busy shared core inflates both alike")
    section.figure("agent.next_over_first.100", f"next turn ÷ first request, {TURNS[-1]} turns",
                   last["next_ms"] / last["first_ms"], "×")
    section.figure("agent.growth_next.100_over_0", f"next turn at {TURNS[-1]} turns ÷ at 0 turns",
                   last["next_ms"] / data[0]["next_ms"], "×", None,
                   "1 would be cost in proportion to what is new only")
    section.tables.append(table(("finished turns", "request bytes", "prompt chars", "first request, ms CPU",
                                 "next turn, ms CPU"),
                                [(t, d["bytes"], d["prompt_chars"], fmt(d["first_ms"]), fmt(d["next_ms"]))
                                 for t, d in data.items()]))
    section.notes.append(
        f"In process, Qwen3 template, qwen3 + hermes parsers: a {SYSTEM_BYTES // 1024} KB system prompt, "
        f"{TOOL_COUNT} tools of ~{TOOL_SCHEMA_BYTES} B schemas, N finished turns (call + result). 'First "
        "request': nothing kept (the template probed, as at start-up). 'Next turn': the same "
        "conversation's previous turn was served just before (`--prefix-cache-bytes`: its decoded messages and "
        "render are kept); the prompt is checked "
        "byte-identical to the first request's. Best of several runs (CPU time of this process).")
    section.data = {str(k): v for k, v in data.items()}
    return section
