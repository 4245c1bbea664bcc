"""Section: issue 26's goals at a glance — one table of the figures the other sections measured
(toolwire against the do-nothing relay and, where its results are on this machine, SGLang's Rust
gateway SMG), each with its goal and whether it is met. It runs last and measures nothing itself.

SMG runs only in its own harness (``../shared/peers/smg/run_all.sh``: its venvs, tokenizer and fake
workers live in ``/tmp/smg``): its TTFT results are read from ``$BENCH_SMG_LOGS`` (default
``/tmp/smg/logs``: ``ttft.txt``, ``ttft_notools.txt``, ``ttft_tool.txt``) with their date; with
``BENCH_SMG=1`` the harness's ``ttft`` runs are started first (several minutes; PyPI on first use).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

from bench.report import Figure, Section, at_most, fmt, table

TITLE = "Issue 26's goals: toolwire vs the relay vs SMG"
RUNS = (("ttft.txt", "first text token, tools in the request"),
        ("ttft_notools.txt", "first text token, no tools"),
        ("ttft_tool.txt", "first tool-call delta"))
#: goal → the figures of other sections that measure it (a key ending in ``*``: every key it begins)
GOALS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("1. first token (vs the relay)", ("proxy.ttft_added_ratio_to_relay", "proxy.ttft_added_p50_ms.paced")),
    ("2. agent-sized turns", ("agent.next_turn_ms.100", "agent.next_over_first.100")),
    ("3. no refusals under agent load", ("offload.*", "burst.*")),
    ("4. non-streaming CPU", ("whole.ratio.*",)),
    ("5. parsers vs SGLang", ("sglang.min_ratio", "parsers.*.growth")),
)


def smg_results(logs: Path) -> list[tuple[str, str, dict[str, Any]]]:
    """(what, date, ``ttft_ms`` by target) of each SMG harness TTFT run found in ``logs``."""
    found = []
    for name, what in RUNS:
        path = logs / name
        if not path.is_file():
            continue
        lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.startswith("{")]
        if not lines:
            continue
        data = json.loads(lines[-1]).get("ttft_ms") or {}
        if "toolwire" in data and "smg" in data:
            found.append((what, time.strftime("%Y-%m-%d %H:%M", time.localtime(path.stat().st_mtime)), data))
    return found


def run_smg(ctx: Any) -> None:
    script = ctx.root.parent / "shared" / "peers" / "smg" / "run_all.sh"
    if not script.is_file():
        ctx.log(f"goals: {script} not found; SMG not run")
        return
    ctx.log("goals: SMG side by side (run_all.sh ttft) …")
    subprocess.run(["bash", str(script), "ttft"], cwd=str(ctx.root), check=False, stdout=subprocess.DEVNULL)


def run(ctx: Any) -> Section:
    section = Section(__name__, TITLE)
    if os.environ.get("BENCH_SMG", "") not in ("", "0"):
        run_smg(ctx)
    figures: dict[str, Figure] = {f.key: f for s in ctx.shared.get("sections", ()) for f in s.figures}
    rows = []
    for goal, keys in GOALS:
        chosen = [f for k in keys for key, f in figures.items()
                  if (key.startswith(k[:-1]) if k.endswith("*") else key == k)]
        if not chosen:
            rows.append((goal, "not measured in this run", "", "", ""))
        for f in chosen:
            rows.append((goal, f.label, f"{fmt(f.value)} {f.unit}".strip(), str(f.target) if f.target else "",
                         f.verdict))
    smg = smg_results(Path(os.environ.get("BENCH_SMG_LOGS", "/tmp/smg/logs")))
    for what, date, data in smg:
        tw, peer = data["toolwire"]["p50"], data["smg"]["p50"]
        key = "goals.ttft_over_smg." + what.split(",")[0].replace(" ", "_").replace("-", "_")
        figure = section.figure(key + ("_notools" if "no tools" in what else ""),
                                f"TTFT p50 toolwire ÷ SMG, {what}", tw / peer if peer else None, "×", at_most(1.0),
                                f"{fmt(tw)} vs {fmt(peer)} ms, SMG harness run of {date}")
        rows.insert(len([r for r in rows if r[0].startswith("1.")]),
                    ("1. first token (vs SMG)", figure.label, f"{fmt(figure.value)} ×", str(figure.target),
                     figure.verdict))
    if not smg:
        missing = "no SMG harness results on this machine (../shared/peers/smg/run_all.sh ttft, or BENCH_SMG=1)"
        rows.insert(0, ("1. first token (vs SMG)", missing, "", "", ""))
    section.tables.append(table(("goal", "figure", "value", "target", "verdict"), rows))
    section.notes.append(
        "Figures of the sections above, gathered by goal; SMG's from its own harness (same token stream, "
        "toolwire and SMG measured alternately in one run), dated, since they may come from an earlier run.")
    return section
