"""Tool calls written as a name between markers followed by a JSON arguments object.

    <｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{…}<｜tool▁call▁end｜>                          (DeepSeek V3.1)
    <｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\\n```json\\n{…}\\n```<｜tool▁call▁end｜>   (DeepSeek V3)
    <|tool_call_begin|>functions.NAME:0<|tool_call_argument_begin|>{…}<|tool_call_end|>    (Kimi K2)
    <function=NAME>{…}</function>                                                       (Functionary v3.1)

The arguments stream through as written. ``split_id`` turns the text before ``name_end`` into
``(name, call id)`` for formats whose call header carries an id; ``name_template`` is how such a
header is written (``functions.$name:$index``). ``named_json`` declares a whole format.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass

from parsers.core.cursor import Cursor
from parsers.core.driver import Out
from parsers.core.markers import MarkerSet
from parsers.format import CallContext, ToolFormat
from parsers.shapes.jsoncall import json_args_object
from parsers.shapes.sections import Sections, as_tuple, calls_format, section_pairs
from parsers.wire import WireFormat


@dataclass(frozen=True)
class NamedJsonShape:
    name_end: str
    call_end: str = ""  # "" when the arguments object ends the call
    type_sep: str | None = None  # text up to this marker is the call's type ("function"), ignored
    fence: bool = False  # arguments wrapped in a ```json … ``` fence
    split_id: Callable[[str], tuple[str, str | None]] | None = None
    name_limit: int = 256


def named_json_call(shape: NamedJsonShape, cur: Cursor, out: Out,
                    stop: MarkerSet | None = None) -> Generator[None, None, bool]:
    """Read one call after its opening marker, up to and including ``call_end`` (missing where
    the next call or the section's end follows, or the model ended the output). A name that runs
    into another marker of the format fails there (the marker is left for the next call)."""
    if shape.type_sep:
        _, term = yield from cur.read_until(MarkerSet((shape.type_sep,)), limit=64)
        if term is None:
            return False
    ends = MarkerSet((shape.name_end, *(m for m in (stop.markers if stop else ()) if m != shape.name_end)))
    text, term = yield from cur.read_until(ends, limit=shape.name_limit)
    if term is None:
        if cur.eof and len(text) <= shape.name_limit:  # the output ended inside the name: all of it is this call's
            cur.pos = len(cur.buf)
        return False
    if term != shape.name_end:
        cur.unread(len(term))
        return False
    name, call_id = shape.split_id(text.strip()) if shape.split_id else (text.strip(), None)
    if not name:
        return False
    out.calls.header(name, call_id)
    if shape.fence:
        yield from cur.skip_ws()
        if (yield from cur.match(("```json", "```"))) is None:
            return False
    if not (yield from json_args_object(cur, out, stop)):
        return False
    if shape.fence and not (yield from cur.closing("```")):
        return False
    if shape.call_end and not (yield from cur.closing(shape.call_end)):
        # a closer the model left out before the next call (or the section's end) — Kimi K2 in
        # its thinking: the arguments object was complete, so the call is
        return stop is not None and (yield from cur.match(tuple(m for m in stop.markers if m != shape.call_end),
                                                          consume=False)) is not None
    return True


def named_json(call_start: str | tuple[str, ...], shape: NamedJsonShape, section: Sections | None = None, *,
               bare_calls: bool = False, call_type: str = "function", name_template: str = "$name",
               separator: str = "", trim_around_calls: bool = True) -> ToolFormat:
    """Calls of ``NAME`` + JSON arguments between markers, optionally inside a section (a call
    outside any section too with ``bare_calls``). Written with the first call start and the first
    section, ``call_type`` before a ``type_sep``, the header as ``name_template``, ``separator``
    between calls."""
    starts = as_tuple(call_start)
    pairs = section_pairs(section)
    stop = MarkerSet(m for m in (*starts, shape.call_end, *(m for pair in pairs for m in pair)) if m)

    def read_call(ctx: CallContext, cur: Cursor, out: Out, marker: str) -> Generator[None, None, bool]:
        return (yield from named_json_call(shape, cur, out, stop))

    typed = call_type + shape.type_sep if shape.type_sep else ""
    args = "```json\n$args\n```" if shape.fence else "$args"
    wire = WireFormat(starts[0] + typed + name_template + shape.name_end + args + shape.call_end,
                      section=pairs[0] if pairs else ("", ""), separator=separator)
    markers = tuple(m for m in (shape.type_sep, shape.name_end, shape.call_end) if m and m.strip() == m and m)
    return calls_format(starts, read_call, wire=wire, section=section, bare_calls=bare_calls, markers=markers,
                        trim_around_calls=trim_around_calls)
