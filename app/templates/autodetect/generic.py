"""Detector classes built from a learned format (when no registered detector matches).

A generic tool-call detector is a ``ToolCallDetector`` subclass whose ``format`` is
``parsers.shapes.generic.generic`` over the learned ``GenericFormat``, with the learned call
written as a ``WireFormat`` (so constrained decoding works for it too). A generic
reasoning detector is a ``ReasoningDetector`` subclass with the learned markers. Both carry a
``label`` (shown by ``/health`` and ``inspect-template``).
"""

from __future__ import annotations

from collections.abc import Generator, Iterable

from app.templates.autodetect.analysis import ReasoningFormat, ToolFormat
from parsers.declare import Cursor, Out, Program, ReasoningDetector, ToolCallDetector, generic

_ENCODINGS = {"json-call": "JSON", "tag+json": "JSON args", "tag+params": "tagged args"}


def tool_label(fmt: ToolFormat) -> str:
    assert fmt.generic is not None
    start = fmt.generic.start_markers[0] if fmt.generic.start_markers else "?"
    return f"generic({start} + {_ENCODINGS.get(fmt.encoding, fmt.encoding)})"


def tool_detector(fmt: ToolFormat) -> type[ToolCallDetector]:
    """A detector class for a learned tool-call format (``fmt.generic`` must be set)."""
    learned = fmt.generic
    assert learned is not None
    attrs = {
        "__doc__": f"Learned from a chat template: {fmt.readable_pattern()!r}",
        "__module__": __name__,
        "label": tool_label(fmt),
        "format": generic(learned, fmt.wire),
    }
    return type("GenericToolCalls", (ToolCallDetector,), attrs)


class LearnedReasoning(ReasoningDetector):
    """Learned markers; an end marker that opens the output closes an empty block (templates that
    render ``</think>`` before an answer without reasoning teach the model to write it)."""

    def make_program(self, in_reasoning: bool | None, stop_markers: Iterable[str] = ()) -> Program:
        inside = super().make_program(in_reasoning, stop_markers)
        outside = super().make_program(False, stop_markers)
        ends = self.ends()

        def program(cur: Cursor, out: Out) -> Generator[None, None, None]:
            lead: list[str] = []
            yield from cur.skip_ws(lead.append)
            if (yield from cur.match(ends)) is not None:
                out.content.strip_next()
                yield from outside(cur, out)
                return
            (out.reasoning if in_reasoning else out.content).write("".join(lead))
            yield from inside(cur, out)

        return program


def reasoning_label(fmt: ReasoningFormat) -> str:
    return f"generic({fmt.start or '(prompt)'} … {fmt.end})"


def reasoning_detector(fmt: ReasoningFormat) -> type[ReasoningDetector]:
    """A reasoning detector class for learned markers (``fmt.end`` must be set)."""
    assert fmt.end
    attrs = {
        "__doc__": f"Learned from a chat template: {fmt.start!r} … {fmt.end!r}",
        "__module__": __name__,
        "label": reasoning_label(fmt),
        "start": (fmt.start,) if fmt.start else (),
        "end": fmt.end,
        "content_markup": tuple(fmt.content_markup),
        "force_reasoning": bool(fmt.forced_open.get("default")),
    }
    return type("GenericReasoning", (LearnedReasoning,), attrs)
