"""What a benchmark section hands back, and how the report and ``summary.json`` are written.

A section returns a ``Section``: its figures (each with its target and whether it is met), tables
and notes as Markdown. ``render_markdown`` prints every figure with its target and ``met`` /
``missed``; ``summary`` is the JSON form (``bench/out/summary.json``).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class Target:
    op: str  # "<=" | ">="
    bound: float

    def met(self, value: float | None) -> bool | None:
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return None
        return value <= self.bound if self.op == "<=" else value >= self.bound

    def __str__(self) -> str:
        sign = "≤" if self.op == "<=" else "≥"
        return f"{sign} {self.bound:g}"


def at_most(bound: float) -> Target:
    return Target("<=", bound)


def at_least(bound: float) -> Target:
    return Target(">=", bound)


@dataclass
class Figure:
    key: str  # stable id, e.g. "parsers.qwen25.growth"
    label: str  # what a reader sees
    value: float | None
    unit: str = ""
    target: Target | None = None
    note: str = ""  # e.g. "not measured: …", "worst of 5 cases"

    @property
    def met(self) -> bool | None:
        return self.target.met(self.value) if self.target is not None else None

    @property
    def verdict(self) -> str:
        if self.target is None:
            return ""
        met = self.met
        return "not measured" if met is None else ("met" if met else "missed")

    def as_json(self) -> dict[str, Any]:
        return {"key": self.key, "label": self.label, "value": self.value, "unit": self.unit,
                "target": str(self.target) if self.target else None, "met": self.met, "verdict": self.verdict,
                "note": self.note}


@dataclass
class Section:
    name: str
    title: str
    figures: list[Figure] = field(default_factory=list)
    tables: list[str] = field(default_factory=list)  # Markdown blocks
    notes: list[str] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)  # raw measurements for summary.json
    seconds: float = 0.0
    error: str | None = None

    def figure(self, *args: Any, **kwargs: Any) -> Figure:
        fig = Figure(*args, **kwargs)
        self.figures.append(fig)
        return fig


# ---------------------------------------------------------------------- statistics helpers


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def fmt(value: float | None, digits: int = 2) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if abs(value) >= 100:
        return f"{value:.0f}"
    return f"{value:.{digits}f}"


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    for row in rows:
        lines.append("| " + " | ".join(str(c) for c in row) + " |")
    return "\n".join(lines)


# ---------------------------------------------------------------------- the report


def figures_table(figures: Sequence[Figure]) -> str:
    return table(("figure", "value", "target", "verdict", "note"),
                 ((f.label, f"{fmt(f.value)} {f.unit}".strip(), str(f.target) if f.target else "", f.verdict, f.note)
                  for f in figures))


def render_markdown(sections: Sequence[Section], header: Sequence[str] = ()) -> str:
    out: list[str] = ["# toolwire benchmark report", ""]
    out += list(header)
    targeted = [f for s in sections for f in s.figures if f.target is not None]
    met = sum(1 for f in targeted if f.met)
    missed = [f for f in targeted if f.met is False]
    unmeasured = [f for f in targeted if f.met is None]
    out += ["", f"**{met} of {len(targeted)} targets met**"
            + (f"; missed: {', '.join(f.label for f in missed)}" if missed else "")
            + (f"; not measured: {', '.join(f.label for f in unmeasured)}" if unmeasured else ""), ""]
    out += ["## Summary", "", figures_table([f for s in sections for f in s.figures]), ""]
    for s in sections:
        out += [f"## {s.title}", "", f"_section `{s.name}`, {s.seconds:.0f} s_", ""]
        if s.error:
            out += [f"**section failed:** `{s.error}`", ""]
        for note in s.notes:
            out += [note, ""]
        for block in s.tables:
            out += [block, ""]
    return "\n".join(out).rstrip() + "\n"


def summary(sections: Sequence[Section], extra: dict[str, Any]) -> dict[str, Any]:
    figures = [f.as_json() for s in sections for f in s.figures]
    targeted = [f for f in figures if f["target"]]
    return {
        **extra,
        "targets": {"total": len(targeted), "met": sum(1 for f in targeted if f["met"]),
                    "missed": [f["key"] for f in targeted if f["met"] is False],
                    "not_measured": [f["key"] for f in targeted if f["met"] is None]},
        "figures": figures,
        "sections": [{"name": s.name, "title": s.title, "seconds": round(s.seconds, 1), "error": s.error,
                      "notes": s.notes, "data": s.data} for s in sections],
    }


Log = Callable[[str], None]

__all__ = [
    "Figure",
    "Log",
    "Section",
    "Target",
    "asdict",
    "at_least",
    "at_most",
    "fmt",
    "median",
    "percentile",
    "render_markdown",
    "summary",
    "table",
]
