"""Section: toolwire side by side with SGLang 0.5.23's parsers, on identical chunk sequences.

The bench keeps SGLang out of the project: it creates its own venv (``bench/out/sglang-venv``,
reused when present) with ``pip install --no-deps sglang==0.5.23`` plus the few light packages its
``sglang.srt.function_call`` and ``sglang.srt.parser`` modules import (``LIGHT_PACKAGES``); heavy
optional imports (torch, transformers, xgrammar, IPython, numpy …) get stand-ins inside that venv
only (``bench.sglang_stubs``). The measurement itself runs there (``bench.sglang_worker``): both
parsers in one process, alternating, on the same chunks.

Targets: ≥ 100× faster than SGLang on the 16 KB argument for qwen25, llama3, mistral and
deepseekv31 (the formats whose SGLang detector re-parses the call per chunk); never slower on any
case (ratio ≥ 1). The first table puts each format's ratio beside its growth from the parsers
section (issue 26, goal 5), each with its goal.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.report import Section, at_least, fmt, table

TITLE = "Side by side with SGLang 0.5.23 (same process, same chunks, alternating)"
SGLANG = "sglang==0.5.23"
#: what SGLang's parser modules import, pinned to versions checked to work (openai as sglang pins it)
LIGHT_PACKAGES = ("openai==2.8.0", "pydantic==2.14.3", "orjson==3.13.0", "msgspec==0.22.0",
                  "partial_json_parser==0.2.1.1.post7", "regex==2026.11.15")
HUNDREDFOLD = ("qwen25", "llama3", "mistral", "deepseekv31")
SPEEDUP_TARGET = at_least(100)
NEVER_SLOWER = at_least(1.0)
WORKER_TIMEOUT_S = 900  # on a busy 2-core machine SGLang's quadratic cases alone take minutes


def venv_dir(ctx: Any) -> Path:
    return Path(os.environ.get("BENCH_SGLANG_VENV", ctx.out / "sglang-venv"))


def ensure_venv(ctx: Any) -> tuple[Path, float]:
    """The SGLang venv's python (created on first use); returns it and the seconds spent creating."""
    venv = venv_dir(ctx)
    python = venv / "bin" / "python"
    stamp = venv / ".bench-ready"
    wanted = "\n".join((SGLANG, *LIGHT_PACKAGES))
    if python.exists() and stamp.exists() and stamp.read_text() == wanted:
        return python, 0.0
    start = time.monotonic()
    ctx.log(f"sglang: creating {venv} (pip install --no-deps {SGLANG}, then {len(LIGHT_PACKAGES)} light packages)")
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
    pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run([*pip, "--no-deps", SGLANG], check=True)
    subprocess.run([*pip, *LIGHT_PACKAGES], check=True)
    stamp.write_text(wanted)
    return python, time.monotonic() - start


def goal_table(results: list[dict[str, Any]], parsers: dict[str, Any]) -> str:
    """Issue 26's goal 5 per format: the ratio to SGLang at 16 KB (this run) and toolwire's growth
    64 KB / 16 KB with the garbage collector on (from the parsers section of this run), each with
    its goal beside it."""
    from bench.parsers import GROWTH_TARGET

    by_key = {(r["family"], r["case"]): r for r in results}
    rows = []
    for fam in dict.fromkeys(r["family"] for r in results):
        r16 = by_key.get((fam, "16 KB")) or by_key.get((fam, "reasoning 16 KB"))
        if r16 is None:
            continue
        target = SPEEDUP_TARGET if fam in HUNDREDFOLD else NEVER_SLOWER
        ratio = r16["ratio"]
        growth = parsers.get(fam, {}).get("growth_64_16")
        rows.append((fam, r16["case"], fmt(r16["toolwire_s"] * 1e3),
                     fmt(r16["sglang_s"] * 1e3) if r16["sglang_s"] is not None else "—",
                     f"{fmt(ratio)} ×" if ratio is not None else "—", str(target), _verdict(target.met(ratio)),
                     f"{fmt(growth)} ×" if growth is not None else "— (parsers section not run)",
                     str(GROWTH_TARGET), _verdict(GROWTH_TARGET.met(growth))))
    return table(("format", "case", "toolwire ms", "SGLang ms", "ratio vs SGLang", "goal", "",
                  "growth 64 KB / 16 KB (GC on)", "goal", ""), rows)


def _verdict(met: bool | None) -> str:
    return "—" if met is None else ("met" if met else "**missed**")


def run(ctx: Any) -> Section:
    section = Section(__name__, TITLE)
    try:
        python, created = ensure_venv(ctx)
    except (subprocess.CalledProcessError, OSError) as exc:
        section.notes.append(f"**SGLang could not be installed** ({exc}); nothing was compared.")
        for fam in HUNDREDFOLD:
            section.figure(f"sglang.{fam}.ratio_16kb", f"{fam}: SGLang ÷ toolwire time, 16 KB argument", None, "×",
                           SPEEDUP_TARGET, "not measured: SGLang venv unavailable")
        return section
    out = ctx.out / "sglang-results.json"
    cmd = [str(python), "-m", "bench.sglang_worker", str(out)] + (["--quick"] if ctx.quick else [])
    ctx.log("sglang: measuring (progress below)")
    env = {**os.environ, "PYTHONPATH": str(ctx.root)}
    subprocess.run(cmd, cwd=str(ctx.root), env=env, check=True, timeout=WORKER_TIMEOUT_S)
    data = json.loads(out.read_text())
    results: list[dict[str, Any]] = data["results"]

    by_key = {(r["family"], r["case"]): r for r in results}
    for fam in dict.fromkeys(r["family"] for r in results):
        r16 = by_key.get((fam, "16 KB")) or by_key.get((fam, "reasoning 16 KB"))
        if r16 is None:
            continue
        target = SPEEDUP_TARGET if fam in HUNDREDFOLD else NEVER_SLOWER
        note = "" if not r16.get("sglang_error") else "SGLang's parse was wrong: " + "; ".join(r16["sglang_error"])
        section.figure(f"sglang.{fam}.ratio_16kb", f"{fam}: SGLang ÷ toolwire time, {r16['case']}", r16["ratio"], "×",
                       target, note)
    measured = [r for r in results if r["ratio"] is not None]
    slowest = min(measured, key=lambda r: r["ratio"]) if measured else None
    section.figure("sglang.min_ratio", "smallest SGLang ÷ toolwire ratio over every measured case",
                   slowest["ratio"] if slowest else None, "×", NEVER_SLOWER,
                   f"{slowest['family']} {slowest['case']}; {len(measured)} cases measured, "
                   f"{len(results) - len(measured)} skipped" if slowest else "")

    section.tables.append(goal_table(results, ctx.shared.get("parsers", {})))
    rows = []
    for r in results:
        sg = "skipped: " + r["skipped"] if r["sglang_s"] is None else fmt(r["sglang_s"] * 1e3)
        rows.append((r["family"], r["case"], r["chunks"], fmt(r["toolwire_s"] * 1e3), sg,
                     fmt(r["ratio"]) if r["ratio"] else "—", r["sglang_runs"],
                     "ok" if not r["toolwire_error"] else "WRONG", "—" if r["sglang_s"] is None else
                     ("ok" if not r["sglang_error"] else "wrong: " + "; ".join(r["sglang_error"]))))
    section.tables.append(table(("family", "case", "chunks", "toolwire ms", "SGLang ms", "SGLang ÷ toolwire",
                                 "SGLang runs", "toolwire parse", "SGLang parse"), rows))
    b = data["budget"]
    section.notes.append(
        f"SGLang {data['sglang_version']} in its own venv (Python {data['python']}"
        + (f", created in {created:.0f} s this run" if created else ", reused") + "); stand-ins for "
        f"{', '.join(data['stood_in'])}. Both parsers run in that process on the identical chunk lists, alternating "
        f"({b.get('toolwire_runs', 1)} toolwire runs, one SGLang run, …); each side's figure is its fastest run, "
        "in CPU time of the thread (on a shared machine a run's wall time is mostly its wait for a core); parser "
        "construction is not timed. "
        f"SGLang's runs are budgeted in wall time (the budgets bound how long the bench takes): up to {b['max_rounds']} rounds while its runs of a case total under "
        f"{b['repeat_budget_s']:g} s; a 64 KB case is **skipped** when its projection t16 × t16/t4 exceeds "
        f"{b['skip_above_s']:g} s (SGLang's JSON detectors re-parse the whole call per chunk: quadratic), and any run "
        f"is cut off after {b['timeout_s']:g} s. Cases: one call with a long code-like string argument (1–64 KB), "
        "and a 64 KB reasoning block before a short call (reasoning parser chained in front, as SGLang's server "
        "does; SGLang's gpt-oss always chains its reasoning parser). `SGLang parse` checks its result the way "
        "toolwire's is checked (name, arguments as JSON, reasoning).")
    section.data = data
    return section
