"""Section: toolwire's parser throughput and growth, per detector family.

For every family in ``bench.cases.FAMILIES``: one call whose string argument is 1, 4, 16 and 64 KB
of code-like text, plus a 64 KB reasoning block before a short call (the family's reasoning parser
chained in front); for the qwen3 reasoning parser alone, reasoning blocks of 1–64 KB. Each output
streams in ~4-character chunks (markers whole) through ``parsers.build_response_parser``.

Reported per case: the median time of one ``feed`` (pooled over every chunk of every repetition),
its p99, the mean (total / chunks) and the total, and the CPU time of a whole run. Per family:
growth = CPU time(64 KB) / CPU time(16 KB) (per round, median over the rounds; 4.0 is linear; a
parser that re-scans its buffer per chunk shows ~16). Repetitions of a family's cases are interleaved in rounds so that machine noise hits
every size alike.

Targets: growth ≤ 4.5 for every family, with the garbage collector on; median ≤ 5 µs per chunk
on the JSON-argument formats.
"""

from __future__ import annotations

import time
from typing import Any

from bench.cases import FAMILIES, Case, cases_for
from bench.report import Section, at_most, fmt, median, percentile, table
from bench.timing import run_toolwire

TITLE = "Parser throughput and growth (toolwire)"
GROWTH_TARGET = at_most(4.5)
CHUNK_US_TARGET = at_most(5.0)


def measure(case_list: list[Case], reps: int) -> dict[str, dict[str, Any]]:
    """Interleaved repetitions: rep 1 of every case, rep 2 of every case, … The garbage collector
    stays on, as in the proxy. Each repetition of a case is two runs: one timing every ``feed``
    (wall clock) whose events the check takes in as text between the timed calls
    (``bench.cases.Collected``), and one timed whole in CPU time of the thread whose events are
    dropped as they come, as the proxy drops them once encoded — the one growth is computed from
    (a run's wall time on a shared machine is mostly its wait for a core)."""
    results: dict[str, dict[str, Any]] = {c.label: {"totals": [], "cpu": [], "chunks": [], "errors": set()}
                                          for c in case_list}
    for case in case_list:  # warm-up (imports, caches)
        run_toolwire(case)
    for _ in range(reps):
        for case in case_list:
            run = run_toolwire(case, per_chunk=True)
            r = results[case.label]
            r["totals"].append(run.seconds)
            r["chunks"].extend(run.chunk_seconds or [])
            if run.error:
                r["errors"].add(run.error)
            r["cpu"].append(run_toolwire(case, check=False, clock=time.thread_time).seconds)
    return results


def run(ctx: Any) -> Section:
    section = Section(__name__, TITLE)
    reps = 2 if ctx.quick else 11
    rows = []
    data: dict[str, Any] = {}
    for family in FAMILIES:
        case_list = cases_for(family)
        ctx.log(f"parsers: {family.name} ({len(case_list)} cases × {reps})")
        results = measure(case_list, reps)
        fam_data: dict[str, Any] = {}
        worst_median = 0.0
        for case in case_list:
            r = results[case.label]
            med = median(r["chunks"]) * 1e6
            p99 = percentile(r["chunks"], 99) * 1e6
            total = median(r["totals"])
            best = min(r["totals"])
            mean = total / len(case.chunks) * 1e6
            cpu = median(r["cpu"])
            worst_median = max(worst_median, med)
            errors = sorted(r["errors"])
            fam_data[case.label] = {"chunks": len(case.chunks), "output_chars": len(case.output),
                                    "median_us_per_chunk": round(med, 3), "p99_us_per_chunk": round(p99, 3),
                                    "mean_us_per_chunk": round(mean, 3), "total_ms": round(total * 1e3, 3),
                                    "best_total_ms": round(best * 1e3, 3), "cpu_ms_median": round(cpu * 1e3, 3),
                                    "cpu_ms": [round(t * 1e3, 3) for t in r["cpu"]],
                                    "totals_ms": [round(t * 1e3, 3) for t in r["totals"]], "errors": errors}
            rows.append((family.name, family.kind, case.label, len(case.chunks), fmt(med), fmt(p99), fmt(mean),
                         fmt(total * 1e3), fmt(best * 1e3), fmt(cpu * 1e3), "ok" if not errors else "WRONG: " + "; ".join(errors)))
        series = [c.label for c in case_list if not c.label.startswith("reasoning")] or [c.label for c in case_list]
        big, small = [c for c in case_list if c.label in series and c.size_kb == 64], \
            [c for c in case_list if c.label in series and c.size_kb == 16]
        # per round (the two sizes ran back to back), then the median round: a drift in the machine's
        # speed hits both sizes of a round alike, and one odd repetition moves the median little
        growth = median([b / a for a, b in zip(results[small[0].label]["cpu"], results[big[0].label]["cpu"],
                                               strict=True)])
        wall_growth = median([b / a for a, b in zip(results[small[0].label]["totals"],
                                                    results[big[0].label]["totals"], strict=True)])
        what = "reasoning" if family.kind == "reasoning" else "argument"
        section.figure(f"parsers.{family.name}.growth", f"{family.name}: growth, {what} 64 KB / 16 KB", growth, "×",
                       GROWTH_TARGET)
        section.figure(f"parsers.{family.name}.us_per_chunk",
                       f"{family.name}: µs per chunk, median (worst of {len(case_list)} cases)", worst_median, "µs",
                       CHUNK_US_TARGET if family.kind == "json" else None,
                       "" if family.kind == "json" else f"{family.kind} format: no target, for information")
        fam_data["growth_64_16"] = round(growth, 3)
        fam_data["growth_64_16_wall"] = round(wall_growth, 3)  # for information: noisy on a shared machine
        data[family.name] = fam_data
    section.tables.append(table(
        ("family", "kind", "case", "chunks", "µs/chunk median", "µs/chunk p99", "µs/chunk mean", "total ms median",
         "total ms best", "CPU ms median", "parse"),
        rows))
    section.notes.append(
        f"Each case: {reps} interleaved repetitions after a warm-up, each of two runs. The first times every "
        "`feed` (wall clock): µs/chunk median and p99 pool every call of every repetition, mean = median total / "
        "chunks; the check takes each chunk's events in as text between the timed calls. The second is timed whole "
        "in CPU time of the thread (`CPU ms median`), its events dropped as they come, as the proxy drops them once "
        "encoded; growth = the median over rounds of its 64 KB / 16 KB time in the same round. The garbage "
        "collector is on throughout. Until issue 26 growth came from wall-clock totals with the collector paused "
        "(the check then kept every event of a run, and the collections that triggered grew with the output); on "
        "this shared machine a run's wall time is mostly its wait for a core, and the figure wandered by ±1 "
        "between runs (`growth_64_16_wall` in summary.json keeps it, for information). "
        "Arguments are code-like text with quotes, backslashes, newlines, tabs and non-ASCII; chunks are "
        "4 characters, markers whole. `parse` checks the folded result (name, arguments, reasoning).")
    section.data = data
    ctx.shared["parsers"] = data
    return section
