"""``make bench``: run every benchmark section, print the report, write ``bench/out/report.md`` and
``bench/out/summary.json``.

A section is a module with ``TITLE`` and ``run(ctx: Context) -> Section`` (see ``bench.report``).
``SECTIONS`` lists them in order; adding a benchmark is adding its module name there (issue 8's
full-size load test goes in as ``"bench.load"``). A section that raises is reported as failed and
the others still run.

Environment:
  BENCH_SECTIONS=parsers,proxy   run only these sections (names without the ``bench.`` prefix)
  BENCH_QUICK=1                  fewer repetitions and shorter load phases (a smoke run; figures are rougher)
"""

from __future__ import annotations

import importlib
import json
import os
import platform
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.report import Section, render_markdown, summary

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out"

#: every section, in order.
SECTIONS: list[str] = [
    "bench.parsers",  # parser throughput and growth, per detector family
    "bench.sglang",  # the same chunk sequences through SGLang 0.5.23's parsers, side by side
    "bench.proxy",  # proxy overhead: added TTFT, tokens/s, CPU per 1 000 tokens
    "bench.first_token",  # issue 35, goal 4: the first token before and after, one request to each in turn
    "bench.peers",  # issue 35, goal 4: the first token against SMG in four rigs (where its harness is set up)
    "bench.agent",  # issue 26: agent-sized turns, CPU before the backend is asked, first vs next turn
    "bench.shapes",  # issue 35: an agent's next turn on every face and shape, process-tree CPU, cache on / off
    "bench.whole",  # issue 26: a non-streaming answer's CPU vs the same answer streamed
    "bench.load",  # issue 8: 500 concurrent streams through one worker, twice; errors, cross-talk, memory
    "bench.scale",  # issue 24: tokens/s through 3 replicas vs 1 behind Caddy (tests/scale_cluster.py)
    "bench.offload",  # issue 28: a probe's worst wait while heavy requests are prepared, before and after
    "bench.control_text",  # issue 38: the client control-text scan and trace against the render
    "bench.goals",  # issue 26's goals in one table (the figures above, and SMG's where its harness ran); last
]


@dataclass
class Context:
    """What every section gets: where to write, how thorough to be, how to report progress."""

    root: Path = ROOT
    out: Path = OUT
    quick: bool = False
    started: float = field(default_factory=time.monotonic)
    shared: dict[str, Any] = field(default_factory=dict)  # results one section leaves for a later one

    def log(self, message: str) -> None:
        print(f"[bench {time.monotonic() - self.started:6.1f}s] {message}", file=sys.stderr, flush=True)


def selected(names: list[str]) -> list[str]:
    wanted = os.environ.get("BENCH_SECTIONS", "").strip()
    if not wanted:
        return names
    keep = {("bench." + w.strip()) if not w.strip().startswith("bench.") else w.strip() for w in wanted.split(",")}
    return [n for n in names if n in keep] + sorted(keep - set(names))


def run_section(name: str, ctx: Context) -> Section:
    start = time.monotonic()
    ctx.log(f"section {name} …")
    try:
        module = importlib.import_module(name)
        section: Section = module.run(ctx)
    except Exception as exc:  # noqa: BLE001 — one broken section must not hide the others
        traceback.print_exc()
        title = getattr(sys.modules.get(name), "TITLE", name)
        section = Section(name, title, error=f"{type(exc).__name__}: {exc}")
    section.seconds = time.monotonic() - start
    ctx.log(f"section {name} done in {section.seconds:.0f} s")
    return section


def machine() -> dict[str, Any]:
    return {"python": platform.python_version(), "platform": platform.platform(), "cpus": os.cpu_count(),
            "processor": platform.processor() or platform.machine()}


def main() -> int:
    ctx = Context(quick=os.environ.get("BENCH_QUICK", "") not in ("", "0"))
    ctx.out.mkdir(parents=True, exist_ok=True)
    sections: list[Section] = ctx.shared.setdefault("sections", [])  # the goals section reads the others'
    for name in selected(SECTIONS):
        sections.append(run_section(name, ctx))
    total = time.monotonic() - ctx.started
    info = machine()
    header = [
        f"Run {time.strftime('%Y-%m-%d %H:%M:%S')} on {info['cpus']} CPUs, Python {info['python']}, "
        f"{info['platform']}; total {total:.0f} s" + (" (BENCH_QUICK: rough figures)" if ctx.quick else "") + ".",
        "",
        ("Times are wall-clock on a shared machine; comparisons are made side by side in one run "
         "(alternating), so ratios are the figures to trust, not absolute times."),
    ]
    text = render_markdown(sections, header)
    (ctx.out / "report.md").write_text(text, encoding="utf-8")
    data = summary(sections, {"generated": time.strftime("%Y-%m-%dT%H:%M:%S"), "seconds": round(total, 1),
                              "quick": ctx.quick, "machine": info})
    (ctx.out / "summary.json").write_text(json.dumps(data, indent=2, ensure_ascii=False), encoding="utf-8")
    print(text)
    print(f"wrote {ctx.out / 'report.md'} and {ctx.out / 'summary.json'} ({total:.0f} s)")
    return 1 if any(s.error for s in sections) else 0


if __name__ == "__main__":
    sys.exit(main())
