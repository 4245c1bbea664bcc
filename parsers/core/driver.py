"""Running a program over one response: the output side (``Out``, ``CallWriter``) and the ``Driver``.

A *program* is a generator function ``(cursor, out) -> Generator`` (``Program``): it reads the
model's output through a ``Cursor`` and writes events through an ``Out``. The driver resumes it
after each fed chunk — or takes the lane it left (``parsers.core.cursor``), which does the same
without resuming it — and runs it to completion at ``finish()``. Whatever the program does not place
is content: text left unconsumed when it returns, and — if it raises, which is a bug but must never
reach a client — everything from that point on (an open call is then ended as not ok).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Generator
from typing import Any

from parsers.core.channels import TextChannel
from parsers.core.cursor import Cursor
from parsers.core.markers import MarkerSet
from parsers.core.trailing import TrailingTokens
from parsers.events import CallArgs, CallEnd, CallStart, Content, Event, Reasoning

log = logging.getLogger("toolwire.parsers")

#: a program: reads the output through the cursor, writes events through ``Out``
Program = Callable[[Cursor, "Out"], Generator[None, None, object]]


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def is_json_object(text: str) -> bool:
    """True if ``text`` is one strict JSON object (no NaN/Infinity)."""
    try:
        return isinstance(json.loads(text, parse_constant=_reject_constant), dict)
    except (ValueError, RecursionError):
        return False


class CallWriter:
    """Numbers tool calls 0, 1, 2 … and writes their events.

    Life of a call: ``begin`` (recording of its source text starts) → ``header`` (name and id
    known: ``CallStart``) → ``args`` fragments → ``end(ok)``. The content channel is told about a
    call's edges once the call exists (at its header and its end), so whitespace trimming around
    calls never touches text that turns out not to be a call. At ``end`` a call that looked complete
    is checked once: its arguments must form one JSON object (an empty argument text becomes
    ``{}``). A call that ends before its header was sent was never shown to anyone, so its source
    text simply becomes content.
    """

    __slots__ = (
        "_args",
        "_cursor",
        "_out",
        "_trimmed",
        "capped",
        "header_sent",
        "known_names",
        "max_calls",
        "next_index",
        "open",
        "passed_through",
        "unknown_names",
    )

    def __init__(self, out: Out, cursor: Cursor, known_names: frozenset[str] | None = None,
                 max_calls: int | None = None) -> None:
        self._out = out
        self.max_calls = max_calls  # beyond this many calls, a call's text is content
        self.capped = 0  # calls that were content because of ``max_calls``
        self._cursor = cursor
        self.next_index = 0
        self.open = False
        self.header_sent = False
        self._args: list[str] = []
        self.known_names = known_names
        self.unknown_names = 0
        self._trimmed = ""  # whitespace trimmed before the current call (given back if it fails)
        self.passed_through = 0  # malformed calls whose text went back to the content

    def begin(self, consumed_marker: str = "") -> None:
        self.open = True
        self.header_sent = False
        self._args = []
        self._cursor.record(consumed_marker)

    def cancel(self) -> None:
        """Forget a call that turned out to be empty markup (e.g. an empty call list)."""
        self._cursor.recorded()
        self.open = False
        self.header_sent = False

    def header(self, name: str, call_id: str | None = None) -> None:
        if self.max_calls is not None and self.next_index >= self.max_calls:
            self.capped += 1  # never shown: its text becomes content at ``end``, as a call without a header
            return
        if self.known_names is not None and name not in self.known_names:
            self.unknown_names += 1
        self.header_sent = True
        self._trimmed = self._out.content.boundary()
        self._out.events.append(CallStart(self.next_index, name, call_id))

    def args(self, text: str) -> None:
        if not text or not self.header_sent:
            return
        self._args.append(text)
        events = self._out.events
        last = events[-1] if events else None
        if type(last) is CallArgs:
            last.text += text
        else:
            events.append(CallArgs(self.next_index, text))

    @property
    def args_written(self) -> bool:
        return bool(self._args)

    def end(self, ok: bool) -> bool:
        """Close the current call; returns whether it counted as a complete call.

        A call that fails is passed through as content (with the whitespace trimmed before it),
        except when the output was cut off inside it, or ended before the call even had a name:
        then its text is an unfinished call, not an answer, and is dropped.
        """
        cursor = self._cursor
        if not ok and cursor.eof and cursor.truncated:
            cursor.pos = len(cursor.buf)  # cut off inside the call: the rest is the unfinished call
        raw = cursor.recorded()
        self.open = False
        at_end = cursor.eof and cursor.available == 0
        if not ok and at_end and (cursor.truncated or not self.header_sent):
            raw = ""
        if not self.header_sent:
            if raw:
                self.passed_through += 1
                self._out.content.write(raw)
            else:  # cut off before it had a name: the markup it began with is not content either
                self._out.content.boundary()
            return False
        if ok:
            if not self._args:
                self.args("{}")
            ok = is_json_object("".join(self._args))
        passthrough = "" if ok or not raw else self._trimmed + raw
        if passthrough:
            self.passed_through += 1
        self._out.events.append(CallEnd(self.next_index, ok, passthrough))
        if not passthrough:
            self._out.content.boundary()
        self.next_index += 1
        self._args = []
        self.header_sent = False
        self._trimmed = ""
        return ok


class Out:
    """Where a program writes: ordered events through the content/reasoning channels and calls."""

    __slots__ = ("calls", "content", "events", "reasoning")

    def __init__(self, cursor: Cursor, *, trim_around_calls: bool = False,
                 known_names: frozenset[str] | None = None, max_calls: int | None = None,
                 content_markup: tuple[str, ...] = ()) -> None:
        self.events: list[Event] = []
        self.content = TextChannel(
            self._write_content, trim_before_boundary=trim_around_calls, trim_after_boundary=trim_around_calls,
            markup=MarkerSet(content_markup) if content_markup else None,
        )
        self.reasoning = TextChannel(
            self._write_reasoning, trim_before_boundary=True, trim_after_boundary=True, strip_leading=True
        )
        self.calls = CallWriter(self, cursor, known_names, max_calls)

    def _write_content(self, text: str) -> None:
        events = self.events
        if events and type(events[-1]) is Content:
            events[-1].text += text
        else:
            events.append(Content(text))

    def _write_reasoning(self, text: str) -> None:
        events = self.events
        if events and type(events[-1]) is Reasoning:
            events[-1].text += text
        else:
            events.append(Reasoning(text))

    def take(self) -> list[Event]:
        events, self.events = self.events, []
        return events


class Driver:
    """Drives one program over one response: ``feed`` text, then ``finish`` once.

    ``content_markup``: the format's envelope markers, dropped from the content wherever they
    occur (``TextChannel``); ``end_tokens``: the end-of-turn tokens its templates close a turn
    with, dropped from the input when they are its last text (``TrailingTokens``)."""

    __slots__ = ("_done", "_gen", "_trailing", "cursor", "failed", "out")

    def __init__(self, program: Program, *, trim_around_calls: bool = False,
                 known_names: frozenset[str] | None = None, max_calls: int | None = None,
                 content_markup: tuple[str, ...] = (), end_tokens: tuple[str, ...] = ()) -> None:
        self.cursor = Cursor()
        self.out = Out(self.cursor, trim_around_calls=trim_around_calls, known_names=known_names, max_calls=max_calls,
                       content_markup=content_markup)
        self._trailing = TrailingTokens(end_tokens) if end_tokens else None
        self._gen = program(self.cursor, self.out)
        self._done = False
        self.failed = False  # the program raised (a detector bug); the rest went through as content

    def feed(self, text: str) -> list[Event]:
        if text and self._trailing is not None:
            text = self._trailing.feed(text)
        if text:
            cursor = self.cursor
            cursor.feed(text)
            lane = cursor.lane
            if lane is None:
                self._run()
            else:  # the suspended primitive's shortcut (``parsers.core.cursor``); else resume it
                try:
                    taken = lane()
                except Exception:  # a detector bug must never reach the client
                    log.exception("detector program failed; passing the rest of the output through as content")
                    self._fail()
                else:
                    if not taken:
                        self._run()
        return self.out.take()

    def finish(self, truncated: bool = False) -> list[Event]:
        """End of stream: every primitive decides with what it has; held text is released.
        ``truncated``: the backend stopped at its token limit, not at the model's own end."""
        if self._trailing is not None:
            rest = self._trailing.finish()
            if rest:
                self.cursor.feed(rest)
        self.cursor.eof = True
        self.cursor.truncated = truncated
        for _ in range(1000):  # a correct program needs one resumption; never spin forever
            if self._done:
                break
            self._run()
        if not self._done:
            log.error("detector program did not finish at end of stream; passing the rest through")
            self.failed = True
            self._abandon()
        self.out.content.close()
        self.out.reasoning.close()
        return self.out.take()

    def forget_held(self) -> None:
        """Drop the trailing whitespace the channels hold back (it belongs to text already read
        that will not be returned: a prefilled message, ``parsers.prefill``)."""
        self.out.content.forget_held()
        self.out.reasoning.forget_held()

    def _run(self) -> None:
        self.cursor.lane = None  # a lane is valid only at the suspension that left it
        if self._done:
            self._flush_unplaced()
            return
        try:
            next(self._gen)
        except StopIteration:
            self._done = True
            self._flush_unplaced()
        except Exception:  # a detector bug must never reach the client
            log.exception("detector program failed; passing the rest of the output through as content")
            self._fail()

    def _fail(self) -> None:
        self.failed = True
        self._abandon()

    def _abandon(self) -> None:
        self._done = True
        self.cursor.lane = None  # the program will not run again: nor will its lane
        if self.out.calls.open:
            self.out.calls.end(False)
        self._flush_unplaced()

    def _flush_unplaced(self) -> None:
        cursor = self.cursor
        if cursor.pos < len(cursor.buf):
            self.out.content.write(cursor.buf[cursor.pos :])
            cursor.pos = len(cursor.buf)
