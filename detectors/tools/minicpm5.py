"""OpenBMB MiniCPM5 tool calls: bare XML ``function`` elements in the answer text.

    Checking both.<function name="get_weather"><param name="city">Paris</param><param name="days">3</param></function>
    <function name="write_file"><param name="content"><![CDATA[line 1
    x < y && z]]></param></function>

A value holding ``<``, ``&`` or a newline is wrapped in ``<![CDATA[…]]>``; elsewhere the XML
entities (``&lt;`` ``&amp;`` ``&#38;`` …) are decoded. The template writes a CDATA value exactly
as it was (``'<![CDATA[' + value + ']]>'``), so a CDATA section is taken literally — a
``</param>`` inside it is text, and its whitespace is the value's own: code keeps its
indentation and its last newline. The whitespace around a value outside CDATA is stripped (the
reference parsers read the element text and ``strip()`` it). Values are typed by the tool's JSON
schema — the template renders non-string values with Jinja's default formatting, so Python
literals (``True``, ``{'a': 1}``) are accepted (``None`` is null where the schema allows null).
Attributes may be quoted with ``"`` or ``'``. Text between calls is content.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable, Generator

from detectors.turns import CHATML
from parsers.declare import (
    ArgsObject,
    CallContext,
    Cursor,
    MarkerSet,
    Out,
    ToolCallDetector,
    WireFormat,
    XmlParams,
    arg_type,
    calls_format,
    escape,
)

FUNCTION_STARTS = ('<function name="', "<function name='")
FUNCTION_END = "</function>"
PARAM_STARTS = ('<param name="', "<param name='")
PARAM_END = "</param>"
CDATA_START, CDATA_END = "<![CDATA[", "]]>"
_WS = " \t\r\n"
_NULLS = ("null", "None")
_TAG_END = MarkerSet((">",))
_CDATA_END = MarkerSet((CDATA_END,))
_QUOTE_END = {q: MarkerSet((q,)) for q in "\"'"}
_VALUE_MARKERS = MarkerSet((CDATA_START, PARAM_END))
_NAMED = ("amp", "lt", "gt", "quot", "apos")  # XML's predefined entities
_REFERENCE = re.compile(r"&(?:#[0-9]{1,7}|#[xX][0-9a-fA-F]{1,6}|" + "|".join(_NAMED) + ");")
_REFERENCE_PREFIX = re.compile(r"#[0-9]{0,7}|#[xX][0-9a-fA-F]{0,6}|" + "|".join(
    sorted({n[:k] for n in _NAMED for k in range(len(n) + 1)}, key=len, reverse=True)))


class _StringArg:
    """Writes one string value as JSON text as it streams: without the whitespace around it
    (trailing whitespace is held until more text shows it is inner), except inside CDATA
    (``literal``: all of it is the value's). For a parameter that may be null, a value that is
    exactly ``None`` (the template's rendering) or ``null`` becomes JSON null; the first
    characters are held while they could still spell one (at most four)."""

    __slots__ = ("_emit", "_held", "_maybe_null", "_opened", "_started")

    def __init__(self, emit: Callable[[str], None], nullable: bool) -> None:
        self._emit = emit
        self._started = False
        self._held = ""
        self._maybe_null: str | None = "" if nullable else None
        self._opened = False

    def write(self, text: str) -> None:
        if not self._started:
            text = text.lstrip(_WS)
            if not text:
                return
            self._started = True
        body = text.rstrip(_WS)
        if not body:
            self._held += text
            return
        self._out(self._held + body)
        self._held = text[len(body):]

    def literal(self, text: str) -> None:
        """Text from a CDATA section: its whitespace is part of the value."""
        if not text:
            return
        self._started = True
        self._out(self._held + text)
        self._held = ""

    def _out(self, text: str) -> None:
        if self._maybe_null is not None:
            candidate = self._maybe_null + text
            if any(word.startswith(candidate) for word in _NULLS):
                self._maybe_null = candidate
                return
            self._maybe_null, text = None, candidate
        if not self._opened:
            self._emit('"')
            self._opened = True
        self._emit(escape(text))

    def close(self) -> None:
        if self._maybe_null in _NULLS:
            self._emit("null")
            return
        if self._maybe_null:
            pending, self._maybe_null = self._maybe_null, None
            self._out(pending)
        if not self._opened:
            self._emit('"')
        self._emit('"')


class _Entities:
    """Decodes XML character references (``&amp;`` ``&lt;`` ``&#38;`` ``&#x26;`` …) in streamed
    text; an ``&`` that does not start one is text. A tail that may still become a reference
    (at most nine characters) is held; ``close`` releases it as written."""

    __slots__ = ("_emit", "_pending")

    def __init__(self, emit: Callable[[str], None]) -> None:
        self._emit = emit
        self._pending = ""

    def write(self, text: str) -> None:
        if self._pending:
            text, self._pending = self._pending + text, ""
        parts: list[str] = []
        pos, n = 0, len(text)
        while pos < n:
            amp = text.find("&", pos)
            if amp < 0:
                parts.append(text[pos:])
                break
            parts.append(text[pos:amp])
            ref = _REFERENCE.match(text, amp)
            if ref is not None:
                parts.append(html.unescape(ref.group()))
                pos = ref.end()
            elif _REFERENCE_PREFIX.fullmatch(text, amp + 1):
                self._pending = text[amp:]
                break
            else:
                parts.append("&")
                pos = amp + 1
        joined = "".join(parts)
        if joined:
            self._emit(joined)

    def close(self) -> None:
        if self._pending:
            self._emit(self._pending)
            self._pending = ""


def _value(cur: Cursor, write: Callable[[str], None],
           literal: Callable[[str], None] | None = None) -> Generator[None, None, bool]:
    """One parameter value after its opening tag, through ``</param>``: CDATA sections go to
    ``literal`` as written (default: ``write``), other text has its entities decoded."""
    entities = _Entities(write)
    while True:
        marker = yield from cur.until(_VALUE_MARKERS, entities.write)
        entities.close()
        if marker is None:
            return False
        if marker == PARAM_END:
            return True
        if (yield from cur.until(_CDATA_END, literal or write)) is None:
            return False


def _tag_rest(cur: Cursor, quote: str) -> Generator[None, None, str | None]:
    """After an opening tag's ``name=`` and its quote: the name up to the matching quote, then
    the end of the tag (``>``, nothing but whitespace before it). ``None`` if malformed."""
    text, term = yield from cur.read_until(_QUOTE_END[quote], limit=256)
    if term is None or not text.strip():
        return None
    rest, term = yield from cur.read_until(_TAG_END, limit=64)
    if term is None or rest.strip():
        return None
    return text.strip()


def _read_call(ctx: CallContext, cur: Cursor, out: Out, marker: str) -> Generator[None, None, bool]:
    name = yield from _tag_rest(cur, marker[-1])
    if name is None:
        return False
    out.calls.header(name)
    tool = ctx.tools_by_name.get(name)
    args = ArgsObject(out.calls)
    while True:
        yield from cur.skip_ws()
        opened = yield from cur.match((*PARAM_STARTS, FUNCTION_END))
        if opened is None:
            return False
        if opened == FUNCTION_END:
            break
        key = yield from _tag_rest(cur, opened[-1])
        if key is None:
            return False
        typed = arg_type(tool.param_schema(key), tool.parameters) if tool is not None else arg_type(None)
        args.key(key)
        if typed.streams:
            value = _StringArg(args.raw, typed.nullable)
            if not (yield from _value(cur, value.write, value.literal)):
                return False
            value.close()
        else:
            parts: list[str] = []
            if not (yield from _value(cur, parts.append)):
                return False
            args.raw(typed.json("".join(parts)))
    args.close()
    return True


#: string values are written as CDATA sections (``]]>`` split across two), other values as
#: XML-escaped JSON; one call per line
WIRE = WireFormat('<function name="$name">$args</function>', separator="\n",
                  args=XmlParams('<param name="$key">$value</param>', string_end=CDATA_END, cdata=True))


class MiniCpm5(ToolCallDetector):
    end_tokens = CHATML
    format = calls_format(FUNCTION_STARTS, _read_call, markers=(FUNCTION_END, *PARAM_STARTS, PARAM_END), wire=WIRE)
