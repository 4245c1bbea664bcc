"""Reusable detector programs for the common shapes; a detector declares its markers and picks one.

Each builder returns a function ``body(detector, cursor, out)`` to assign as a detector's ``body``.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from parsers.core.cursor import Cursor
from parsers.core.jsoncall import DEFAULT_SHAPE, JsonCallShape, json_call
from parsers.core.markers import MarkerSet
from parsers.core.namedcall import NamedJsonShape, named_json_call
from parsers.core.program import Out
from parsers.core.sections import Body, Section, marker_calls
from parsers.core.xmlcall import XmlCallShape, xml_call


def tagged_json_calls(start: str | tuple[str, ...], end: str, shape: JsonCallShape = DEFAULT_SHAPE) -> Body:
    """``START {"name": …, "arguments": {…}} END``, repeated; anything else is content.
    A start or end marker outside any JSON string breaks the call."""
    starts = (start,) if isinstance(start, str) else tuple(start)
    stop = MarkerSet((*starts, end))

    def parse(detector: Any, cur: Cursor, out: Out, marker: str) -> Generator[None, None, bool]:
        if not (yield from json_call(cur, out, shape, stop)):
            return False
        return (yield from cur.closing(end))

    return marker_calls(starts, parse)


def _flat(section: Section | tuple[Section, ...] | None) -> tuple[str, ...]:
    if not section:
        return ()
    pairs = (section,) if isinstance(section[0], str) else section
    return tuple(m for pair in pairs for m in pair)  # type: ignore[union-attr]


def named_json_calls(call_start: str | tuple[str, ...], shape: NamedJsonShape,
                     section: Section | tuple[Section, ...] | None = None, bare_calls: bool = False) -> Body:
    """Calls of ``NAME`` + JSON arguments between markers, optionally inside a section."""
    starts = (call_start,) if isinstance(call_start, str) else call_start
    stop = MarkerSet(m for m in (*starts, shape.call_end, *_flat(section)) if m)

    def parse(detector: Any, cur: Cursor, out: Out, marker: str) -> Generator[None, None, bool]:
        return (yield from named_json_call(shape, cur, out, stop))

    return marker_calls(starts, parse, section, bare_calls)


def xml_calls(call_start: str | tuple[str, ...], shape: XmlCallShape, section: Section | tuple[Section, ...] | None = None,
              bare_calls: bool = False, wrapper_end: str | None = None) -> Body:
    """Calls with XML-style parameters (see ``parsers.core.xmlcall``). ``wrapper_end`` closes a
    per-call wrapper after the call's own end (Qwen3-Coder: ``</function>`` then ``</tool_call>``)."""

    def parse(detector: Any, cur: Cursor, out: Out, marker: str) -> Generator[None, None, bool]:
        if not (yield from xml_call(shape, detector.tools_by_name, cur, out)):
            return False
        if wrapper_end:
            return (yield from cur.closing(wrapper_end))
        return True

    return marker_calls(call_start, parse, section, bare_calls)


def wrapped_xml_calls(wrapper: tuple[str, str], call_start: str, shape: XmlCallShape) -> Body:
    """One call per wrapper — ``WRAPPER_OPEN CALL_START … CALL_END WRAPPER_CLOSE`` (Qwen3-Coder's
    ``<tool_call><function=…>``, Seed-OSS's ``<seed:tool_call><function=…>``). A bare call without
    the wrapper is accepted too; a stray closing wrapper after it is markup."""
    opener, closer = wrapper

    def parse(detector: Any, cur: Cursor, out: Out, marker: str) -> Generator[None, None, bool]:
        if marker == opener:
            yield from cur.skip_ws()
            if not (yield from cur.expect(call_start)):
                return False
        if not (yield from xml_call(shape, detector.tools_by_name, cur, out)):
            return False
        if marker == opener:
            return (yield from cur.closing(closer))
        yield from cur.skip_ws()
        yield from cur.match((closer,))
        return True

    return marker_calls((opener, call_start), parse)
