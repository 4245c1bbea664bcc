"""Before/after: the parser cases through a committed version of ``parsers/`` + ``detectors/`` and
through the working tree, alternating, in fresh processes.

    python -m bench.compare REF [--rounds 5] [--families qwen25,glm45]

``REF`` is any git commit (read with ``git archive``; nothing in the checkout changes). Each round
runs one subprocess per tree over every case (toolwire only, totals, no per-chunk timing); a case's
figure is its fastest round. Writes ``bench/out/before_after-REF.md`` and ``.json`` and prints the
table. Used to record what a change to the parser core bought.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out"


def export_tree(ref: str) -> Path:
    sha = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", ref], check=True, capture_output=True,
                         text=True).stdout.strip()
    dest = OUT / "baseline" / sha
    if not (dest / "parsers").is_dir():
        data = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", sha, "parsers", "detectors"],
                              check=True, capture_output=True).stdout
        dest.mkdir(parents=True, exist_ok=True)
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            tar.extractall(dest)
    return dest


def worker(tree: str, families: list[str]) -> dict[str, float]:
    """(In the subprocess) one timed pass over every case, with ``tree``'s parsers."""
    sys.path.insert(0, tree)
    from bench.cases import FAMILIES, cases_for
    from bench.timing import run_toolwire

    assert Path(sys.modules["parsers"].__file__ or "").resolve().is_relative_to(Path(tree).resolve())
    out: dict[str, float] = {}
    for family in FAMILIES:
        if families and family.name not in families:
            continue
        for case in cases_for(family):
            run_toolwire(case, check=False)
            out[f"{family.name}|{case.label}"] = min(run_toolwire(case, check=False).seconds for _ in range(3))
    return out


def run_tree(tree: Path, families: list[str]) -> dict[str, float]:
    code = ("import json, sys; from bench.compare import worker; "
            f"print(json.dumps(worker({str(tree)!r}, {families!r})))")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", code], cwd=str(tree), env=env, check=True, capture_output=True,
                          text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("ref")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--families", default="")
    args = parser.parse_args(argv)
    families = [f for f in args.families.split(",") if f]
    before_tree = export_tree(args.ref)
    trees = {"before": before_tree, "after": ROOT}
    best: dict[str, dict[str, float]] = {"before": {}, "after": {}}
    for r in range(args.rounds):
        for side, tree in trees.items():
            for key, seconds in run_tree(tree, families).items():
                best[side][key] = min(seconds, best[side].get(key, seconds))
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
    rows: list[dict[str, Any]] = []
    for key in best["after"]:
        family, case = key.split("|")
        b, a = best["before"].get(key), best["after"][key]
        rows.append({"family": family, "case": case, "before_ms": round(b * 1e3, 3) if b else None,
                     "after_ms": round(a * 1e3, 3), "speedup": round(b / a, 3) if b else None})
    from bench.report import fmt, table

    text = (f"# Parser core before/after: {args.ref} ({before_tree.name}) vs working tree\n\n"
            f"Fastest of {args.rounds} alternating rounds (fresh process per tree and round), toolwire only.\n\n"
            + table(("family", "case", "before ms", "after ms", "speed-up ×"),
                    ((r["family"], r["case"], fmt(r["before_ms"]), fmt(r["after_ms"]), fmt(r["speedup"]))
                     for r in rows)) + "\n")
    name = f"before_after-{before_tree.name}"
    (OUT / f"{name}.md").write_text(text)
    (OUT / f"{name}.json").write_text(json.dumps({"ref": args.ref, "sha": before_tree.name, "rows": rows}, indent=1))
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
