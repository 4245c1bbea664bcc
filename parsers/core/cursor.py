"""The shared input buffer of a detector program, and the primitives programs are written in.

A detector is a *program*: a generator function that reads the model's output through a
``Cursor`` and writes events. Each primitive below is a generator used with ``yield from``; it
consumes as much of the buffer as it can and suspends (a bare ``yield``) only when the answer
depends on text that has not arrived. The driver (``parsers.core.driver.Driver``) resumes the
program after every fed chunk and once more at end of stream (``eof``), where every primitive
decides with what it has.

Contracts every primitive keeps:

* **Linear time.** Text is consumed as it is examined; what stays unconsumed between chunks is
  bounded (a marker-prefix holdback, or a caller-set ``limit``), so each character is examined a
  bounded number of times. ``feed`` drops consumed text, so the buffer never grows with the output.
* **Split invariance.** A primitive's result depends on the text only, never on where chunks
  were cut: whenever a decision could change with more text, it waits.
* **Failure without loss.** A primitive that finds text it cannot accept returns a falsy result
  *without consuming* that text, so the program can hand it on (typically as content).

Raw recording (``record``/``recorded``) keeps the source text of a tool call so a call that never
completes can be passed through verbatim; ``tap``/``tapped`` does the same for a caller's own
stretch of text, independently.

**Lanes.** Most chunks of a long output change nothing but the position: the text of a long
string argument, of reasoning, of content, with no character in it that could end it. A primitive
about to suspend in such a state may leave a *lane* (``Cursor.lane``): a callable that, after the
next feed, either does exactly what the primitive's next pass would do before suspending again
(write the new text, advance ``pos``) and returns ``True``, or returns ``False`` having changed
nothing. The driver tries the lane before resuming the program, and clears it before every
resumption, so a lane never outlives the suspension it was left at; resuming instead of taking
the lane is always correct. This spares resuming a stack of nested generators per chunk.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Generator

from parsers.core.jsonscan import JsonValueScan, Scan
from parsers.core.markers import MarkerSet

Step = Generator[None, None, object]
Write = Callable[[str], None]

_NON_WS = re.compile(r"[^ \t\r\n]")


def discard(_text: str) -> None:
    """A ``Write`` that drops its text."""


class Cursor:
    __slots__ = ("_rec_from", "_rec_parts", "_tap_from", "_tap_parts", "buf", "eof", "lane", "pos", "truncated")

    def __init__(self) -> None:
        self.buf = ""
        self.pos = 0
        self.eof = False
        self.truncated = False  # set with eof when the output was cut at the token limit
        #: the shortcut the suspended primitive left for the next feed (see the module docstring)
        self.lane: Callable[[], bool] | None = None
        self._rec_from: int | None = None
        self._rec_parts: list[str] = []
        self._tap_from: int | None = None
        self._tap_parts: list[str] = []

    # ------------------------------------------------------------------ feeding and recording

    def feed(self, text: str) -> None:
        """Append streamed text, dropping what has already been consumed."""
        pos = self.pos
        if pos:
            if self._rec_from is not None:
                if pos > self._rec_from:
                    self._rec_parts.append(self.buf[self._rec_from : pos])
                self._rec_from = 0
            if self._tap_from is not None:
                if pos > self._tap_from:
                    self._tap_parts.append(self.buf[self._tap_from : pos])
                self._tap_from = 0
            self.buf = self.buf[pos:] + text
            self.pos = 0
        else:
            self.buf += text

    def record(self, prefix: str = "") -> None:
        """Start recording consumed text (``prefix`` = already-consumed text that belongs to it)."""
        self._rec_parts = [prefix] if prefix else []
        self._rec_from = self.pos

    def recorded(self) -> str:
        """The text consumed since ``record``; recording stops."""
        if self._rec_from is None:
            return ""
        parts = self._rec_parts
        if self.pos > self._rec_from:
            parts.append(self.buf[self._rec_from : self.pos])
        self._rec_from = None
        self._rec_parts = []
        return "".join(parts)

    def tap(self) -> None:
        """Start keeping consumed text, independently of ``record`` (which calls use): a format
        that needs the source of a stretch spanning several calls (LFM2's echo check)."""
        self._tap_parts = []
        self._tap_from = self.pos

    def tapped(self) -> str:
        """The text consumed since ``tap``; keeping stops."""
        if self._tap_from is None:
            return ""
        parts = self._tap_parts
        if self.pos > self._tap_from:
            parts.append(self.buf[self._tap_from : self.pos])
        self._tap_from = None
        self._tap_parts = []
        return "".join(parts)

    @property
    def available(self) -> int:
        return len(self.buf) - self.pos

    # ------------------------------------------------------------------ primitives

    def until(self, markers: MarkerSet, write: Write) -> Generator[None, None, str | None]:
        """Write text until one of ``markers``; consume the marker and return it.
        At end of stream, write the rest and return ``None``."""
        first_char_at = markers.first_char_at
        lane: Callable[[], bool] | None = None
        while True:
            buf, pos = self.buf, self.pos
            if first_char_at(buf, pos) is None:  # fast path: nothing here can begin a marker
                if pos < len(buf):
                    write(buf[pos:])
                    self.pos = len(buf)
                if self.eof:
                    return None
                if lane is None:
                    lane = self._text_lane(first_char_at, write)
                self.lane = lane
                yield
                continue
            found = markers.find(buf, pos, self.eof)
            if found is not None:
                at, marker = found
                if at > pos:
                    write(buf[pos:at])
                self.pos = at + len(marker)
                return marker
            if self.eof:
                if pos < len(buf):
                    write(buf[pos:])
                    self.pos = len(buf)
                return None
            end = markers.safe_end(buf, pos)
            if end > pos:
                write(buf[pos:end])
                self.pos = end
            yield

    def _text_lane(self, first_char_at: Callable[[str, int], object], write: Write) -> Callable[[], bool]:
        """``until``'s lane: new text in which no marker can begin is written and consumed."""

        def lane() -> bool:
            buf, pos = self.buf, self.pos
            if first_char_at(buf, pos) is not None:
                return False
            write(buf[pos:])
            self.pos = len(buf)
            return True

        return lane

    def read_until(self, markers: MarkerSet, limit: int = 512) -> Generator[None, None, tuple[str, str | None]]:
        """Collect text up to one of ``markers`` (consumed). Returns ``(text, marker)``; ``marker``
        is ``None`` if the stream ended first or ``limit`` characters passed without a marker (the
        text examined so far is then left unconsumed)."""
        searched = 0  # offset from pos already known to hold no marker start
        while True:
            buf, pos = self.buf, self.pos
            found = markers.find(buf, pos + searched, self.eof)
            if found is not None and found[0] - pos <= limit:
                at, marker = found
                self.pos = at + len(marker)
                return buf[pos:at], marker
            if found is not None or len(buf) - pos > limit + markers.longest or self.eof:
                return buf[pos:], None
            searched = markers.safe_end(buf, pos + searched) - pos
            yield

    def unread(self, n: int) -> None:
        """Give back the last ``n`` characters just consumed (a marker that turned out to belong
        to the next step). Only valid right after consuming them, before any ``yield``."""
        assert 0 <= n <= self.pos
        self.pos -= n

    def match(self, literals: tuple[str, ...], consume: bool = True) -> Generator[None, None, str | None]:
        """Return the longest of ``literals`` that the input starts with here (consumed unless
        ``consume=False``), or ``None`` (consuming nothing) once none can."""
        while True:
            buf, pos = self.buf, self.pos
            rest = len(buf) - pos
            best = None
            pending = False
            for lit in literals:
                if buf.startswith(lit, pos):
                    if best is None or len(lit) > len(best):
                        best = lit
                elif rest < len(lit) and lit.startswith(buf[pos:]):
                    pending = True
            if pending and not self.eof:
                yield
                continue
            if best is not None and consume:
                self.pos = pos + len(best)
            return best

    def skip_ws(self, write: Write = discard) -> Generator[None, None, bool]:
        """Consume whitespace (passing it to ``write``). Returns ``False`` if the stream ended."""
        while True:
            buf, pos = self.buf, self.pos
            found = _NON_WS.search(buf, pos)
            if found is not None:
                if found.start() > pos:
                    write(buf[pos : found.start()])
                self.pos = found.start()
                return True
            if len(buf) > pos:
                write(buf[pos:])
                self.pos = len(buf)
            if self.eof:
                return False
            yield

    def peek(self, n: int = 1) -> Generator[None, None, str]:
        """The next ``n`` characters without consuming them (fewer at end of stream)."""
        while self.available < n and not self.eof:
            yield
        return self.buf[self.pos : self.pos + n]

    def rest(self, write: Write) -> Step:
        """Write everything until end of stream."""
        while True:
            if self.pos < len(self.buf):
                write(self.buf[self.pos :])
                self.pos = len(self.buf)
            if self.eof:
                return None
            yield

    def json_value(self, write: Write, stop: MarkerSet | None = None) -> Generator[None, None, bool]:
        """Stream one JSON value (starting at a non-whitespace character) to ``write`` as written.

        Returns ``True`` once the value is complete. Returns ``False`` at end of stream, or when a
        marker of ``stop`` appears outside any string (left unconsumed: the value is broken).
        """
        scan = JsonValueScan(stop.first_chars if stop is not None else "")
        lane: Callable[[], bool] | None = None
        while True:
            buf, pos = self.buf, self.pos
            end, state = scan.advance(buf, pos, self.eof)
            if end > pos:
                write(buf[pos:end])
                self.pos = end
            if state is Scan.DONE:
                return True
            if state is Scan.STOPPED:
                assert stop is not None
                marker = stop.starts_at(buf, end, self.eof)
                if marker is True:
                    yield
                    continue
                if marker:
                    return False
                write(buf[end])
                self.pos = end + 1
                continue
            if self.eof:
                return False
            if scan.in_string:  # a long string argument: the next chunks can skip the resumption
                if lane is None:
                    lane = self._string_lane(scan, write)
                self.lane = lane
            yield

    def _string_lane(self, scan: JsonValueScan, write: Write) -> Callable[[], bool]:
        """``json_value``'s lane inside a string: new text that does not end the string is taken
        into the scan, written and consumed."""
        runs_on = scan.string_runs_on

        def lane() -> bool:
            buf, pos = self.buf, self.pos
            if not runs_on(buf, pos):
                return False
            if pos < len(buf):
                write(buf[pos:])
                self.pos = len(buf)
            return True

        return lane

    def json_string(self, limit: int = 4096) -> Generator[None, None, str | None]:
        """Read one complete JSON string (at a ``"``) and return it decoded; ``None`` (nothing
        consumed) if there is no string here, its text (quotes included) is longer than ``limit``
        characters, or it never ends. The answer does not depend on how the text was split."""
        while self.available == 0:
            if self.eof:
                return None
            yield
        if self.buf[self.pos] != '"':
            return None
        scan = JsonValueScan()
        scanned = 0  # offset from pos up to which the string has been scanned
        while True:
            buf, pos = self.buf, self.pos
            end, state = scan.advance(buf, pos + scanned, self.eof)
            if state is Scan.DONE:
                if end - pos > limit:
                    return None
                try:
                    value = json.loads(buf[pos:end])
                except ValueError:
                    return None
                self.pos = end
                return value if isinstance(value, str) else None
            scanned = end - pos
            if self.eof or scanned > limit:
                return None
            yield

    def closing(self, literal: str) -> Generator[None, None, bool]:
        """Consume optional whitespace and a closing ``literal``. A missing closer is accepted only
        where the model itself ended the output (not cut at the token limit): engines often stop on
        the closer as a stop string, and then it never reaches us."""
        yield from self.skip_ws()
        if (yield from self.match((literal,))) is not None:
            return True
        return self.eof and self.available == 0 and not self.truncated

    def expect(self, literal: str) -> Generator[None, None, bool]:
        """Consume ``literal`` if the input continues with it; ``False`` (nothing consumed) if not."""
        return (yield from self.match((literal,))) is not None

    def list_separator(self, close: str) -> Generator[None, None, str | None]:
        """After a list element (whitespace allowed around): ``","`` or ``close`` (consumed), a
        trailing ``,`` before ``close`` counting as ``close``; ``None`` for anything else."""
        yield from self.skip_ws()
        sep = yield from self.match((",", close))
        if sep == ",":
            yield from self.skip_ws()
            if (yield from self.expect(close)):
                return close
        return sep


def separated(cur: Cursor, write: Write, close: str, element: Callable[[], Generator[None, None, bool]],
              end: str) -> Generator[None, None, bool]:
    """Elements separated by ``,`` up to ``close`` (see ``Cursor.list_separator``): calls
    ``element()`` for each, writes ``", "`` between them and ``end`` at ``close``. The cursor is
    at the first element. ``False`` as soon as an element or a separator fails."""
    while True:
        if not (yield from element()):
            return False
        sep = yield from cur.list_separator(close)
        if sep is None:
            return False
        if sep == close:
            write(end)
            return True
        write(", ")
