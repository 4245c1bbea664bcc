"""Folding events into one message — the non-streaming answer, and held-call streaming.

Both follow one rule: a call counts only once it ended ``ok``. A call that did not is replaced by
its ``raw`` text as content (empty when the output was cut inside it). ``CallHolder`` applies the
rule while streaming (calls are released whole when they complete), ``fold`` applies it to a
whole event list, so the non-streaming answer and every stream fold to the same message.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from parsers.events import CallArgs, CallEnd, CallStart, Content, Event, Reasoning


@dataclass
class FoldedCall:
    index: int
    name: str
    arguments: str
    id: str | None = None


@dataclass
class FoldedMessage:
    content: str = ""
    reasoning: str = ""
    calls: list[FoldedCall] = field(default_factory=list)
    unfinished_calls: int = 0  # calls that ended not ok (never complete)


class CallHolder:
    """Releases each tool call only once it is complete; numbers released calls 0, 1, 2 …
    (a dropped call leaves no gap). Text events pass straight through. A call that ends not ok is
    unfinished: its text, if it gives any back (a malformed call), becomes content; a call cut off
    by the token limit gives none. Complete calls before it stand — in a call list cut off before
    it closes as between separate call blocks."""

    __slots__ = ("_held", "_released", "unfinished")

    def __init__(self) -> None:
        self._held: list[Event] = []
        self._released = 0
        self.unfinished = 0

    def __call__(self, events: Iterable[Event]) -> list[Event]:
        out: list[Event] = []
        for event in events:
            kind = type(event)
            if kind is CallStart or kind is CallArgs:
                self._held.append(event)
            elif kind is CallEnd:
                held, self._held = self._held, []
                if event.ok:  # type: ignore[union-attr]
                    index = self._released
                    self._released += 1
                    start = held[0]
                    assert isinstance(start, CallStart)
                    out.append(CallStart(index, start.name, start.id))
                    out.append(CallArgs(index, "".join(e.text for e in held[1:] if isinstance(e, CallArgs))))
                    out.append(CallEnd(index, True))
                else:
                    self.unfinished += 1
                    if event.raw:  # type: ignore[union-attr]
                        out.append(Content(event.raw))  # type: ignore[union-attr]
            else:
                out.append(event)
        return out


class CallLimit:
    """Drops every tool call after the first ``limit`` (``parallel_tool_calls: false`` on a backend
    that could not be constrained)."""

    __slots__ = ("limit",)

    def __init__(self, limit: int) -> None:
        self.limit = limit

    def __call__(self, events: Iterable[Event]) -> list[Event]:
        return [e for e in events if not (isinstance(e, (CallStart, CallArgs, CallEnd)) and e.index >= self.limit)]


def fold(events: Iterable[Event]) -> FoldedMessage:
    """The message a list of events describes, unfinished calls replaced by their raw text."""
    holder = CallHolder()
    message = FoldedMessage()
    content: list[str] = []
    reasoning: list[str] = []
    current: FoldedCall | None = None
    args: list[str] = []
    for event in holder(events):
        if isinstance(event, Content):
            content.append(event.text)
        elif isinstance(event, Reasoning):
            reasoning.append(event.text)
        elif isinstance(event, CallStart):
            current = FoldedCall(event.index, event.name, "", event.id)
            args = []
        elif isinstance(event, CallArgs):
            args.append(event.text)
        elif isinstance(event, CallEnd) and current is not None:
            current.arguments = "".join(args)
            message.calls.append(current)
            current = None
    message.content = "".join(content)
    message.reasoning = "".join(reasoning)
    message.unfinished_calls = holder.unfinished
    return message
