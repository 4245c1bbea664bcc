"""Section: scale-out — tokens per second through 3 toolwire replicas vs 1, behind Caddy, on the same
scripted backend.

The processes are the scale tier's (``tests/scale_cluster.py``): each replica is a real ``toolwire
serve --workers W`` process (Qwen3 template, ``qwen3`` reasoning and ``qwen25`` tool parsers), and
Caddy runs ``deploy/compose/Caddyfile`` (round-robin, active health checks). Two Caddys are up at
once, one in front of replica 1 alone, one in front of replicas 1–3, so the two sides are measured
alternately in one run (1, 3, 1, 3, …) on the same backend (``bench.backend``: vLLM SSE, one event
per token, no delay — the model is never the limit).

Each request is agent-shaped: a chat completion with four tools and a history of two finished tool
rounds, streamed; the answer is a reasoning block and one tool call (~110 tokens), checked to end in
``finish_reason: tool_calls``. The client is the lean raw-socket one of ``bench.proxy`` (keep-alive,
closed loop, ``STREAMS`` connections). The figure is the ratio of tokens/s (median of the rounds);
the CPU each part used during the 3-replica rounds says what limits it on this machine.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from bench.cpu import tree_cpu
from bench.proxy import Endpoint, LoadResult, Proc, http_post, load, start_backend
from bench.report import Section, fmt, median, table

TITLE = "Scale-out: 3 replicas vs 1 behind Caddy"
STREAMS = 48
WORKERS = (2, 1)  # --workers of every replica: the 2, and 1 (one process per replica)

_TOOLS = [{"type": "function", "function": {"name": name, "description": f"{name} a file or run a command",
                                            "parameters": {"type": "object", "properties": {
                                                "path": {"type": "string"}, "content": {"type": "string"}},
                                                "required": ["path"]}}}
          for name in ("read_file", "write_file", "list_dir", "run_shell")]


def completion() -> list[str]:
    """Qwen3's answer as tokens (~4 characters each): reasoning, then one qwen25 ``<tool_call>``."""
    thought = ("The tests fail in render.py because the separator is hard-coded; I should read the file, "
               "then write the fix with the separator taken from the caller and run the tests again. ") * 2
    call = '{"name": "write_file", "arguments": {"path": "src/render.py", "content": "def render(rows, sep):\\n' \
           '    return sep.join(str(r) for r in rows)\\n"}}'
    tokens = ["<think>", "\n"] + [thought[i:i + 4] for i in range(0, len(thought), 4)] + ["</think>", "\n\n"]
    return tokens + ["<tool_call>", "\n"] + [call[i:i + 4] for i in range(0, len(call), 4)] + ["\n", "</tool_call>"]


def request_body() -> dict[str, Any]:
    history: list[dict[str, Any]] = [{"role": "system", "content": "You are a coding agent. Use the tools."},
                                     {"role": "user", "content": "The render tests fail; fix them."}]
    for k, (name, args, result) in enumerate([
            ("list_dir", '{"path": "src"}', "render.py\nutil.py"),
            ("read_file", '{"path": "src/render.py"}', "def render(rows):\n    return '\\t'.join(rows)\n")]):
        history.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": f"call_{k}", "type": "function", "function": {"name": name, "arguments": args}}]})
        history.append({"role": "tool", "tool_call_id": f"call_{k}", "content": result})
    return {"model": "bench-model", "messages": history, "tools": _TOOLS, "stream": True, "max_tokens": 4096}


def target(port: int) -> Endpoint:
    return Endpoint("caddy", port, http_post("/v1/chat/completions", port, request_body()),
                    (b'"reasoning_content":"', b'"tool_calls":['), b'"finish_reason":"tool_calls"')


def self_cpu() -> float:
    times = os.times()
    return times.user + times.system


def busy_cpu() -> float:
    """CPU seconds the whole machine has spent busy (all processes, /proc/stat)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def measure_pair(ctx: Any, workers: int, backend: Proc, rounds: int, seconds: float) -> dict[str, Any]:
    """1 replica vs 3 (each ``--workers workers``), alternating ``rounds`` times."""
    from tests.scale_cluster import Caddy, Replica

    template = ctx.root / "tests" / "data" / "templates" / "Qwen-Qwen3-0.6B.jinja"
    args = ["--workers", str(workers), "--backend", backend.url, "--chat-template", str(template),
            "--reasoning-parser", "qwen3", "--tool-call-parser", "qwen25", "--log-level", "warning"]
    replicas = [Replica(args).start() for _ in range(3)]
    caddys: list[Caddy] = []
    try:
        for replica in replicas:
            replica.wait_healthy()
        caddys = [Caddy([replicas[0].address], "/health", "1s"), Caddy([r.address for r in replicas], "/health", "1s")]
        tokens = len(completion())
        for caddy in caddys:  # warm up: connections, template compile, every worker
            asyncio.run(load(target(caddy.port), 8, 1.0, tokens))
        runs: dict[int, list[LoadResult]] = {1: [], 3: []}
        # CPU seconds per side: toolwire (every replica's processes), Caddy, backend, client, the whole machine
        cpu: dict[int, dict[str, float]] = {n: dict.fromkeys(("toolwire", "caddy", "backend", "client", "machine"), 0.0)
                                            for n in (1, 3)}
        wall: dict[int, float] = {1: 0.0, 3: 0.0}
        pids = [p.process.pid for p in replicas if p.process]

        def sample(caddy: Caddy) -> dict[str, float]:
            return {"toolwire": tree_cpu(*pids), "caddy": tree_cpu(caddy.process.pid),
                    "backend": tree_cpu(backend.process.pid), "client": self_cpu(), "machine": busy_cpu()}
        for r in range(rounds):
            for n, caddy in ((1, caddys[0]), (3, caddys[1])):
                ctx.log(f"scale: workers {workers}, round {r + 1}/{rounds}, {n} replica(s), {STREAMS} streams")
                before = sample(caddy)
                result = asyncio.run(load(target(caddy.port), STREAMS, seconds, tokens))
                after = sample(caddy)
                runs[n].append(result)
                for key in cpu[n]:
                    cpu[n][key] += after[key] - before[key]
                wall[n] += result.wall
    finally:
        for caddy in caddys:
            caddy.stop()
        for replica in replicas:
            replica.stop()
    one = median([x.tokens_per_s for x in runs[1]])
    three = median([x.tokens_per_s for x in runs[3]])
    errors = sum(len(x.errors) for xs in runs.values() for x in xs)
    cores = os.cpu_count() or 1
    share = {n: {k: v / wall[n] / cores for k, v in cpu[n].items()} if wall[n] else {} for n in (1, 3)}
    tokens_sent = {n: sum(x.tokens for x in runs[n]) for n in (1, 3)}
    per_k = {n: 1e6 * cpu[n]["toolwire"] / tokens_sent[n] for n in (1, 3)}
    ours = ("toolwire", "caddy", "backend", "client")
    stack_k = {n: 1e6 * sum(cpu[n][k] for k in ours) / tokens_sent[n] for n in (1, 3)}
    return {"workers": workers, "one": one, "three": three, "ratio": three / one if one else float("nan"),
            "errors": errors, "cpu_share": share, "toolwire_cpu_ms_per_1k_tokens": per_k,
            "stack_cpu_ms_per_1k_tokens": stack_k,
            "rounds": {str(n): [round(x.tokens_per_s) for x in xs] for n, xs in runs.items()}}


def run(ctx: Any) -> Section:
    section = Section("scale", TITLE)
    rounds, seconds = (2, 3.0) if ctx.quick else (3, 6.0)
    work = Path(ctx.out) / "scale"
    backend = start_backend(completion(), work)
    try:
        pairs = [measure_pair(ctx, w, backend, rounds, seconds) for w in WORKERS]
    finally:
        backend.stop()
    for pair in pairs:
        w = pair["workers"]
        section.figure(f"scale.ratio_workers{w}", f"tokens/s, 3 replicas ÷ 1 (--workers {w} each)", pair["ratio"],
                       "×", note=f"{fmt(pair['one'], 0)} → {fmt(pair['three'], 0)} tokens/s; {pair['errors']} errors")
        stack = pair["stack_cpu_ms_per_1k_tokens"]
        section.figure(f"scale.cpu_ratio_workers{w}", f"whole-stack CPU per token, 1 replica ÷ 3 (--workers {w})",
                       stack[1] / stack[3], "×", note="the ratio a machine that gave this stack all its cores "
                       "would show, where one replica can already use them all")
        shares = pair["cpu_share"]
        ours = {n: sum(v for k, v in shares[n].items() if k != "machine") for n in (1, 3)}
        section.notes.append(
            f"--workers {w}: the machine was {shares[3]['machine']:.0%} busy (every process on it, other tenants "
            f"too); this stack had {ours[1]:.0%} of its cores with one replica and {ours[3]:.0%} with three. Where the "
            f"CPU is contended, three replicas' processes win a larger share of it, which is most of the measured "
            f"ratio; per token, three replicas cost {stack[3] / stack[1]:.2f}× the CPU of one.")
    def shares(p: dict[str, Any], n: int) -> str:
        return ", ".join(f"{k} {v:.0%}" for k, v in p["cpu_share"][n].items())
    section.tables.append(table(
        ("--workers", "replicas", "tokens/s (median round)", "CPU ms / 1k tokens: toolwire, whole stack",
         "CPU used, share of all cores (machine = every process on it, other tenants too)"),
        ((p["workers"], n, fmt(p["one" if n == 1 else "three"], 0),
          f"{fmt(p['toolwire_cpu_ms_per_1k_tokens'][n])}, {fmt(p['stack_cpu_ms_per_1k_tokens'][n])}", shares(p, n))
         for p in pairs for n in (1, 3))))
    section.notes.append(
        f"{STREAMS} concurrent agent-shaped streams (chat completion, 4 tools, two finished tool rounds in the "
        f"history; answer: reasoning + one tool call, {len(completion())} tokens), closed loop, {rounds} alternating "
        f"rounds of {seconds:.0f} s per side; the figure is the median round. Everything — client, Caddy, backend, "
        f"every replica — shares this machine's {os.cpu_count()} CPUs, so the CPU shares say what limits the ratio.")
    section.data["pairs"] = pairs
    return section
