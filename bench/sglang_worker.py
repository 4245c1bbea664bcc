"""Side by side with SGLang: runs *inside the SGLang venv* (``bench/out/sglang-venv/bin/python``).

    python -m bench.sglang_worker OUT.json [--quick] [--families qwen25,llama3]

For every case of ``bench.cases`` it feeds the identical chunk list to toolwire
(``parsers.build_response_parser``; the repository root is on ``sys.path``, the parsers need only
the standard library) and to SGLang 0.5.23 (``FunctionCallParser.parse_stream_chunk`` /
``parse_stream_end``, with ``ReasoningParser`` chained in front where the case has reasoning, as
SGLang's server does), in the same process, alternating: toolwire, SGLang, toolwire, SGLang …
Parser construction is not timed. Each side's figure is its fastest run (noise only adds time).

Per round toolwire runs ``TOOLWIRE_RUNS`` times (its runs are cheap), SGLang once. Both are
timed in CPU time (``CLOCK``), not wall time.
SGLang's JSON detectors re-parse the whole call on every chunk (quadratic), so its runs are
budgeted: a case runs once when one run is slow, up to ``MAX_ROUNDS`` times when fast; a 64 KB case
is skipped when its projection from the 4 and 16 KB runs (t16 × t16 / t4) exceeds
``SKIP_ABOVE_S``, and any SGLang run is cut off after ``TIMEOUT_S``. Skips and timeouts are
recorded, never hidden.
"""

from __future__ import annotations

import argparse
import gc
import json
import signal
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import sglang_stubs

STOOD_IN = sglang_stubs.install()

from bench.cases import FAMILIES, TOOLS, Case, cases_for
from bench.timing import run_toolwire

MAX_ROUNDS = 5
REPEAT_BUDGET_S = 1.5  # more rounds only while SGLang's runs of this case stay under this in total
SKIP_ABOVE_S = 15.0  # skip a 64 KB SGLang case projected to take longer than this
TIMEOUT_S = 30.0  # cut off any single SGLang run after this
TOTAL_BUDGET_S = 300.0  # once spent, remaining 64 KB SGLang cases are skipped
#: toolwire's runs per round: one run takes milliseconds, one of SGLang's up to a minute, so on a
#: busy machine a single toolwire run per round made its figure one sample of the load
TOOLWIRE_RUNS = 5
#: both sides are timed in CPU time of this thread: on a shared machine the wall time of a run is
#: mostly how long it waited for a core, which a millisecond run and a minute-long one suffer unequally.
#: The budgets below (rounds, skips, timeouts) stay in wall time: they bound how long the bench takes.
CLOCK = time.thread_time


class Timeout(Exception):
    pass


def _alarm(signum: int, frame: Any) -> None:
    raise Timeout()


def load_sglang() -> tuple[Any, Any, list[Any]]:
    from sglang.srt.entrypoints.openai.protocol import Tool
    from sglang.srt.function_call.function_call_parser import FunctionCallParser
    from sglang.srt.parser.reasoning_parser import ReasoningParser

    return FunctionCallParser, ReasoningParser, [Tool.model_validate(t) for t in TOOLS]


def run_sglang(case: Case, sgl: tuple[Any, Any, list[Any]], timeout: float) -> dict[str, Any]:
    """One streamed parse through SGLang; returns seconds (or a timeout) and a correctness check."""
    function_call_parser, reasoning_parser, tools = sgl
    fam = case.family
    gc.collect()
    calls = function_call_parser(tools, fam.sglang_tool) if fam.sglang_tool else None
    chain = case.with_reasoning or fam.sglang_always_reasoning
    reasoning = reasoning_parser(fam.sglang_reasoning, tool_call_parser_active=calls is not None) if chain else None
    reasoning_parts: list[str] = []
    items: list[Any] = []

    def to_tools(text: str) -> None:
        if calls is None or not text:
            return
        _normal, found = calls.parse_stream_chunk(text)
        items.extend(found)

    signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, timeout)
    clock = CLOCK
    wall = time.perf_counter
    t0, w0 = clock(), wall()
    try:
        if reasoning is not None:
            for chunk in case.chunks:
                r, n = reasoning.parse_stream_chunk(chunk)
                if r:
                    reasoning_parts.append(r)
                to_tools(n)
            r, n = reasoning.parse_stream_end()
            if r:
                reasoning_parts.append(r)
            to_tools(n)
        else:
            for chunk in case.chunks:
                _normal, found = calls.parse_stream_chunk(chunk)
                items.extend(found)
        if calls is not None:
            _normal, found = calls.parse_stream_end()
            items.extend(found)
        seconds, wall_seconds = clock() - t0, wall() - w0
    except Timeout:
        return {"seconds": None, "timed_out": True, "after_s": wall() - w0, "error": None}
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    return {"seconds": seconds, "wall_s": wall_seconds, "timed_out": False,
            "error": check(case, items, "".join(reasoning_parts))}


def check(case: Case, items: list[Any], reasoning: str) -> str | None:
    if case.expect_args is not None:
        names = [i.name for i in items if i.name]
        if names[:1] != ["write_file"]:
            return f"call name(s) {names}"
        params = "".join(i.parameters or "" for i in items if i.tool_index == 0)
        try:
            if json.loads(params) != case.expect_args:
                return "arguments differ"
        except ValueError:
            return "arguments are not valid JSON"
    if case.expect_reasoning is not None and reasoning.strip() != case.expect_reasoning:
        return "reasoning differs"
    return None


def measure_case(case: Case, sgl: tuple[Any, Any, list[Any]], skip_reason: str | None) -> dict[str, Any]:
    ours: list[float] = []
    ours_errors: set[str] = set()
    theirs: list[float] = []
    theirs_wall: list[float] = []  # the budgets are about how long the bench takes: wall time
    theirs_errors: set[str] = set()
    result: dict[str, Any] = {"family": case.family.name, "case": case.label, "size_kb": case.size_kb,
                              "chunks": len(case.chunks)}
    run_toolwire(case)  # warm-up
    for rounds in range(MAX_ROUNDS):
        for _ in range(TOOLWIRE_RUNS):
            run = run_toolwire(case, clock=CLOCK)
            ours.append(run.seconds)
            if run.error:
                ours_errors.add(run.error)
        if skip_reason is None:
            if rounds == 0:
                run_sglang(case, sgl, TIMEOUT_S) if case.size_kb <= 4 else None  # warm-up when cheap
            s = run_sglang(case, sgl, TIMEOUT_S)
            if s["timed_out"]:
                result["sglang_timed_out_after_s"] = round(s["after_s"], 2)
                skip_reason = f"timed out after {TIMEOUT_S:.0f} s"
                break
            theirs.append(s["seconds"])
            theirs_wall.append(s["wall_s"])
            if s["error"]:
                theirs_errors.add(s["error"])
            if sum(theirs_wall) > REPEAT_BUDGET_S:
                break
    if skip_reason is not None:
        for _ in range(2 * TOOLWIRE_RUNS):  # toolwire still gets its repetitions
            ours.append(run_toolwire(case, clock=CLOCK).seconds)
    result.update({
        "toolwire_s": min(ours), "toolwire_runs": len(ours), "toolwire_error": sorted(ours_errors) or None,
        "sglang_s": min(theirs) if theirs else None, "sglang_runs": len(theirs),
        "sglang_wall_s": min(theirs_wall) if theirs_wall else None,
        "sglang_error": sorted(theirs_errors) or None, "skipped": skip_reason,
        "ratio": (min(theirs) / min(ours)) if theirs else None,
    })
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--families", default="")
    args = parser.parse_args(argv)
    started = time.monotonic()
    sgl = load_sglang()
    import sglang.version  # noqa: F401  (the installed version, for the report)

    wanted = {f for f in args.families.split(",") if f}
    results: list[dict[str, Any]] = []
    for family in FAMILIES:
        if wanted and family.name not in wanted:
            continue
        by_size: dict[int, float] = {}
        for case in cases_for(family):
            skip = None
            series = family.kind == "reasoning" or not case.label.startswith("reasoning")  # the 1–64 KB series
            if series and case.size_kb == 64:
                t4, t16 = by_size.get(4), by_size.get(16)
                projected = t16 * t16 / t4 if t4 and t16 else None
                if projected is not None and projected > SKIP_ABOVE_S:
                    skip = f"projected {projected:.0f} s (t16 × t16/t4)"
                elif time.monotonic() - started > TOTAL_BUDGET_S:
                    skip = "bench time budget spent"
                elif args.quick and (t16 or 0) > 0.5:
                    skip = "quick run"
            r = measure_case(case, sgl, skip)
            if series and r["sglang_wall_s"] is not None:
                by_size[case.size_kb] = r["sglang_wall_s"]
            results.append(r)
            ratio = f"{r['ratio']:.1f}×" if r["ratio"] else "—"
            print(f"[sglang] {family.name:15} {case.label:16} toolwire {r['toolwire_s'] * 1e3:9.2f} ms  "
                  f"sglang {'%9.2f ms' % (r['sglang_s'] * 1e3) if r['sglang_s'] else '   skipped'}  {ratio}"
                  f"{'  (' + r['skipped'] + ')' if r['skipped'] else ''}", file=sys.stderr, flush=True)
    out = {"sglang_version": sys.modules["sglang.version"].__version__, "stood_in": STOOD_IN,
           "python": sys.version.split()[0], "seconds": time.monotonic() - started, "results": results,
           "budget": {"max_rounds": MAX_ROUNDS, "toolwire_runs": TOOLWIRE_RUNS, "repeat_budget_s": REPEAT_BUDGET_S, "skip_above_s": SKIP_ABOVE_S,
                      "timeout_s": TIMEOUT_S, "total_budget_s": TOTAL_BUDGET_S}}
    Path(args.out).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
