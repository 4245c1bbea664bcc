"""The outer loop most tool-call formats share: content, then calls (optionally inside a section).

``marker_calls(...)`` builds a detector ``body`` from:

* ``call_starts`` — markers that open one call (``<tool_call>``, ``<｜tool▁call▁begin｜>`` …);
* ``parse_call(detector, cursor, out, marker)`` — reads one call after its opening marker (the
  call is begun and ended here), returning whether it was complete;
* ``section`` — an optional ``(begin, end)`` pair (or several alternative pairs) wrapping a run of
  calls (``<|tool_calls_section_begin|>`` … ``<|tool_calls_section_end|>``). Text between calls
  inside a section is markup, not content. With ``bare_calls`` a call may also appear outside any
  section.

After a malformed call the rest of a section is read as content again, so nothing is lost.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

from parsers.core.cursor import Cursor, discard
from parsers.core.markers import MarkerSet
from parsers.core.program import Out

ParseCall = Callable[[Any, Cursor, Out, str], Generator[None, None, bool]]
Body = Callable[[Any, Cursor, Out], Generator[None, None, None]]


Section = tuple[str, str]
ParseOne = Callable[[str], Generator[None, None, bool]]


def section_calls(cur: Cursor, out: Out, inside: MarkerSet, end: str, parse_one: ParseOne) -> Generator[None, None, bool]:
    """The calls inside one section, up to its ``end`` marker (consumed). ``inside`` holds the
    call openers and ``end``; text between calls is markup. ``parse_one(marker)`` reads one call
    after its opener (begun and ended here). After a malformed call this returns, so the rest is
    read as content again. Returns ``False`` when the output ended inside the section."""
    opened = False
    while True:
        marker = yield from cur.until(inside, discard)
        if marker is None:
            if not opened:  # a section that ends before any call: its opener is markup
                out.content.boundary()
            return False
        if marker == end:
            out.content.boundary()
            return True
        opened = True
        out.calls.begin(marker)
        if not out.calls.end((yield from parse_one(marker))):
            return True


def marker_calls(call_starts: str | tuple[str, ...], parse_call: ParseCall,
                 section: Section | tuple[Section, ...] | None = None, bare_calls: bool = False) -> Body:
    starts = (call_starts,) if isinstance(call_starts, str) else tuple(call_starts)
    sections: dict[str, str] = {}
    if section:
        pairs = (section,) if isinstance(section[0], str) else section
        sections = {begin: end for begin, end in pairs}  # type: ignore[misc]
    outer = MarkerSet((*sections, *starts) if bare_calls or not sections else tuple(sections))
    inner = {begin: MarkerSet((*starts, end)) for begin, end in sections.items()}

    def one_call(detector: Any, cur: Cursor, out: Out, marker: str) -> Generator[None, None, bool]:
        out.calls.begin(marker)
        ok = yield from parse_call(detector, cur, out, marker)
        return out.calls.end(ok)

    def body(detector: Any, cur: Cursor, out: Out) -> Generator[None, None, None]:
        while True:
            marker = yield from cur.until(outer, out.content.write)
            if marker is None:
                return
            if marker not in sections:
                yield from one_call(detector, cur, out, marker)
                continue
            def parse_one(opener: str) -> Generator[None, None, bool]:
                return (yield from parse_call(detector, cur, out, opener))

            if not (yield from section_calls(cur, out, inner[marker], sections[marker], parse_one)):
                return

    return body
