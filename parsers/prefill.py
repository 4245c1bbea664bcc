"""Continuing a prefilled assistant message: the output picks up where the client's text stopped.

A request may end with an assistant message the model's output continues (a *prefill*). The parser
chain reads that text first (``ResponseParser.prime``), so it starts in the state the text leaves
it in — inside a reasoning block, inside a call section, halfway through a call — and returns only
what the output adds. ``Continuation`` holds what the primed text left behind for the answer:

* content, reasoning and calls the text completed are the client's own and are not returned;
  whitespace the channels held at its end is its own too;
* a call the text opened but did not finish is the answer's: its start and the arguments written
  so far are returned, whole, with the first new events;
* calls of the answer are numbered from 0, whatever the text wrote before them.

Text the parsers still hold undecided at the end of the prefill (the prefix of a possible marker,
or reasoning whose start state no prompt decided) is returned with the new text once decided.
"""

from __future__ import annotations

from dataclasses import replace

from parsers.events import CallArgs, CallEnd, CallStart, Event


class Continuation:
    """What a primed text left behind (see the module docstring)."""

    __slots__ = ("_offset", "_open")

    def __init__(self, primed: list[Event]) -> None:
        open_from: int | None = None
        offset = 0
        for i, event in enumerate(primed):
            if isinstance(event, CallStart):
                open_from, offset = i, event.index
            elif isinstance(event, CallEnd):
                open_from, offset = None, event.index + 1
        #: the events of a call the text left open, returned before the first new ones
        self._open: list[Event] = primed[open_from:] if open_from is not None else []
        #: calls the text completed: the answer's calls are numbered after subtracting them
        self._offset = offset

    def __call__(self, events: list[Event]) -> list[Event]:
        if self._open:
            events, self._open = self._open + events, []
        offset = self._offset
        if not offset:
            return events
        return [replace(e, index=e.index - offset) if isinstance(e, CallStart | CallArgs | CallEnd) else e
                for e in events]
