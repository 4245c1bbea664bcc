"""Profiling helpers (not part of ``make bench``): where the time goes.

    python -m bench.profile parsers qwen3_coder [16]       cProfile of one family's streamed parse
    python -m bench.profile parsers all [16]               … of every family, one after another
    python -m bench.profile proxy [--streams 16] [--seconds 8] [--experiment raw_client] [--pace-ms 5]
                                                           cProfile of the toolwire process under load

Stats go to ``bench/out/profile/`` (``.prof`` for snakeviz/pstats, ``.txt`` sorted by own time and
by cumulative time) and the top of the table is printed.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out" / "profile"


def write_stats(profile: cProfile.Profile | str, name: str, top: int = 25) -> str:
    OUT.mkdir(parents=True, exist_ok=True)
    prof_path = OUT / f"{name}.prof"
    if isinstance(profile, cProfile.Profile):
        profile.dump_stats(prof_path)
    else:
        prof_path = Path(profile)
    text = io.StringIO()
    for key in ("tottime", "cumulative"):
        stats = pstats.Stats(str(prof_path), stream=text)
        stats.strip_dirs().sort_stats(key).print_stats(top * 2)
    (OUT / f"{name}.txt").write_text(text.getvalue())
    head = io.StringIO()
    pstats.Stats(str(prof_path), stream=head).strip_dirs().sort_stats("tottime").print_stats(top)
    return head.getvalue()


def profile_parsers(family_name: str, size_kb: int, reps: int) -> None:
    from bench.cases import FAMILIES, argument_case, reasoning_case
    from bench.timing import run_toolwire

    families = [f for f in FAMILIES if family_name in ("all", f.name)]
    if not families:
        raise SystemExit(f"unknown family {family_name!r}; one of: {', '.join(f.name for f in FAMILIES)}")
    for family in families:
        case = reasoning_case(family, size_kb) if family.tool_parser is None else argument_case(family, size_kb)
        run_toolwire(case)
        profile = cProfile.Profile()
        profile.enable()
        for _ in range(reps):
            run_toolwire(case, check=False)
        profile.disable()
        print(f"== {family.name} {case.label}: {len(case.chunks)} chunks × {reps}")
        print(write_stats(profile, f"parsers-{family.name}-{size_kb}kb"))


def profile_proxy(streams: int, seconds: float, experiments: tuple[str, ...], pace_ms: float) -> None:
    from bench.proxy import profile_run

    name = "proxy" + "".join("+" + e for e in experiments) + (f"-paced{pace_ms:g}ms" if pace_ms else "")
    prof_path = profile_run(streams, seconds, OUT / f"{name}.prof", experiments, pace_ms)
    print(write_stats(str(prof_path), name, top=40))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    p = sub.add_parser("parsers")
    p.add_argument("family")
    p.add_argument("size_kb", nargs="?", type=int, default=16)
    p.add_argument("--reps", type=int, default=5)
    x = sub.add_parser("proxy")
    x.add_argument("--streams", type=int, default=16)
    x.add_argument("--seconds", type=float, default=8.0)
    x.add_argument("--experiment", action="append", default=[], help="a bench.experiments what-if to apply")
    x.add_argument("--pace-ms", type=float, default=0.0, help="space the backend's tokens (no batching)")
    args = parser.parse_args(argv)
    if args.what == "parsers":
        profile_parsers(args.family, args.size_kb, args.reps)
    else:
        profile_proxy(args.streams, args.seconds, tuple(args.experiment), args.pace_ms)
    return 0


if __name__ == "__main__":
    sys.exit(main())
