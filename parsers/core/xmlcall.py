"""Tool calls whose arguments are XML-style parameters, converted to JSON as they stream.

    <function=NAME><parameter=KEY>VALUE</parameter>…</function>                (Qwen3-Coder)
    NAME<arg_key>KEY</arg_key><arg_value>VALUE</arg_value>…</tool_call>         (GLM 4.5+)
    <invoke name="NAME"><parameter name="KEY">VALUE</parameter>…</invoke>       (MiniMax-M2, Step3)
    <｜DSML｜invoke name="NAME"><｜DSML｜parameter name="KEY" string="true">…     (DeepSeek V3.2+)

The arguments object is written incrementally: ``{`` with the first parameter, then
``"KEY": `` and — for string parameters — the JSON-escaped value as it arrives (the closing tag
is held back by the marker scanner), or — for other types — the converted value once the closing
tag arrives; ``}`` at the end. Types come from the tool's JSON schema (or a ``string="…"``
attribute where the format has one); a parameter the schema does not describe is a string.
Every call's fragments concatenate to one JSON object.
"""

from __future__ import annotations

import ast
import html
import json
import re
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass
from functools import lru_cache
from json.encoder import encode_basestring as _quote  # type: ignore[attr-defined]  # json.dumps(s, ensure_ascii=False)
from typing import Any

from parsers.core.cursor import Cursor
from parsers.core.markers import MarkerSet
from parsers.core.program import CallWriter, Out


@dataclass(frozen=True)
class XmlArgs:
    """How one parameter is written."""

    key_start: str  # "<parameter=" | "<arg_key>" | '<parameter name="' | "<|open|>argument"
    key_end: str  # ">" | "</arg_key>" | '">' | '"' (then attributes up to ">") | "<|sep|>"
    value_end: str  # "</parameter>" | "</arg_value>" | "<|close|>argument<|sep|>"
    value_start: str = ""  # "<arg_value>" where the value has its own opening tag
    attributes: bool = False  # after key_end, attributes run up to ">" (DSML: ` string="true">`)
    string_attribute: str | None = None  # attribute saying whether the value is a string (DSML)
    key_attribute: str | None = None  # the key is this attribute of the text before key_end (K3: key="…")
    type_attribute: str | None = None  # attribute naming the value's JSON type (K3: type="number")
    trim_newline: bool = False  # strip one newline after the opening and one before the closing tag
    #: the closing tag counts only when one of these follows it (or the output ends); otherwise it
    #: is text inside the value (Qwen3.6+: "</parameter>" mid-line is text, "\n</parameter>\n" is markup)
    value_end_follow: tuple[str, ...] = ()
    #: markers that end a value whose closing tag is missing; they are left for the next step
    value_breaks: tuple[str, ...] = ()
    #: a break counts only when one of these follows it (or the output ends); empty: always
    value_break_follow: tuple[str, ...] = ()


@dataclass(frozen=True)
class XmlCallShape:
    """How one call is written, after its opening marker."""

    name_end: tuple[str, ...]  # what ends the name: (">",) | ('">',) | ("\n", "<arg_key>", "</tool_call>")
    call_end: str  # "</function>" | "</invoke>" | "</tool_call>"
    args: XmlArgs
    name_attribute: str | None = None  # the name is this attribute of the header (K3: tool="…")
    self_closing: str | None = None  # header ending that also ends the call, without arguments ('"/>')


def param_kind(schema: Mapping[str, Any] | None) -> tuple[str, bool]:
    """The JSON type a parameter schema asks for, and whether it allows ``null``. The type is
    ``"string"`` when unknown or when a string is among the allowed types."""
    if not isinstance(schema, Mapping):
        return "string", False
    kind = schema.get("type")
    if isinstance(kind, list):
        kinds = [k for k in kind if k != "null"]
        return ("string" if not kinds or "string" in kinds else str(kinds[0])), "null" in kind
    if isinstance(kind, str):
        return kind, kind == "null"
    for combinator in ("anyOf", "oneOf"):
        options = schema.get(combinator)
        if isinstance(options, list):
            subs = [param_kind(o) for o in options if isinstance(o, Mapping)]
            nullable = any(isinstance(o, Mapping) and o.get("type") == "null" for o in options)
            kinds = [k for (k, _), o in zip(subs, options) if not (isinstance(o, Mapping) and o.get("type") == "null")]
            return ("string" if not kinds or "string" in kinds else kinds[0]), nullable or any(n for _, n in subs)
    if "enum" in schema and isinstance(schema["enum"], list):
        values = schema["enum"]
        nullable = None in values
        if all(isinstance(v, str) or v is None for v in values):
            return "string", nullable
        first = next((v for v in values if v is not None), None)
        return {bool: "boolean", int: "integer", float: "number"}.get(type(first), "string"), nullable
    if "properties" in schema:
        return "object", False
    if "items" in schema:
        return "array", False
    return "string", False


def schema_type(schema: Mapping[str, Any] | None) -> str:
    return param_kind(schema)[0]


def convert_value(text: str, kind: str) -> str:
    """JSON text for a non-string parameter value; falls back to a JSON string when it does not
    parse as the declared type (the model's text is never dropped). ``null`` is null."""
    raw = text.strip()
    if raw in ("null", "None"):
        return "null"
    try:
        if kind == "integer":
            return json.dumps(int(raw))
        if kind == "number":
            value = float(raw)
            return json.dumps(int(value) if value.is_integer() and "." not in raw and "e" not in raw.lower()
                              else value)
        if kind == "boolean":
            lowered = raw.lower()
            if lowered in ("true", "false"):
                return lowered
            raise ValueError(raw)
        value = json.loads(raw)
        return json.dumps(value, ensure_ascii=False)
    except (ValueError, OverflowError):
        pass
    try:  # Python literals: {'a': 1}, [1, 2], True, None
        value = ast.literal_eval(raw)
        return json.dumps(value, ensure_ascii=False)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return json.dumps(text, ensure_ascii=False)


def escape(text: str) -> str:
    """``text`` JSON-escaped, without the surrounding quotes (per-character, so chunk-safe)."""
    return _quote(text)[1:-1]


class ArgsObject:
    """Writes one call's arguments object fragment by fragment."""

    __slots__ = ("_calls", "_count")

    def __init__(self, calls: CallWriter) -> None:
        self._calls = calls
        self._count = 0

    def key(self, key: str) -> None:
        self._calls.args(("{" if self._count == 0 else ", ") + json.dumps(key, ensure_ascii=False) + ": ")
        self._count += 1

    def raw(self, text: str) -> None:
        self._calls.args(text)

    def value(self, kind: str, trim_newline: bool, nullable: bool,
              read: Callable[[Callable[[str], None]], Generator[None, None, object]]) -> Generator[None, None, bool]:
        """One parameter value of schema ``kind``, its text produced by ``read(write)`` (falsy
        result: the value did not end properly → ``False``). Strings stream as they arrive;
        other kinds are converted (``convert_value``) once the whole text is in, with one
        newline trimmed at each end when ``trim_newline``."""
        if kind == "string":
            value = StringValue(self.raw, trim_newline, nullable)
            if not (yield from read(value.write)):
                return False
            value.close()
            return True
        parts: list[str] = []
        if not (yield from read(parts.append)):
            return False
        text = "".join(parts)
        if trim_newline:
            text = text.removeprefix("\n").removesuffix("\n")
        self.raw(convert_value(text, kind))
        return True

    def close(self) -> None:
        self._calls.args("}" if self._count else "{}")


class StringValue:
    """Streams one string value, JSON-escaped, optionally trimming one newline at each end.

    When the parameter may be ``null``, the first characters are held while they could still
    spell ``null`` (at most four), so a literal ``null`` becomes JSON null and anything else a
    string — still streamed as it arrives."""

    __slots__ = ("_emit", "_held", "_maybe_null", "_opened", "_started", "_trim")

    def __init__(self, emit: Callable[[str], None], trim_newline: bool, nullable: bool) -> None:
        self._emit = emit
        self._trim = trim_newline
        self._started = False
        self._held = ""
        self._maybe_null: str | None = "" if nullable else None
        self._opened = False

    def write(self, text: str) -> None:
        if not text:
            return
        if self._trim:
            if not self._started and text.startswith("\n"):
                text = text[1:]
            self._started = True
            text = self._held + text
            self._held = ""
            if text.endswith("\n"):
                text, self._held = text[:-1], "\n"
        self._started = True
        if text:
            if self._opened and self._maybe_null is None:  # the common case, inlined
                self._emit(_quote(text)[1:-1])
            else:
                self._out(text)

    def _out(self, text: str) -> None:
        if self._maybe_null is not None:
            candidate = self._maybe_null + text
            if "null".startswith(candidate):
                self._maybe_null = candidate
                return
            self._maybe_null = None
            text = candidate
        if not self._opened:
            self._emit('"')
            self._opened = True
        self._emit(_quote(text)[1:-1])

    def close(self) -> None:
        if self._maybe_null == "null":
            self._emit("null")
            return
        if self._maybe_null:
            self._maybe_null, pending = None, self._maybe_null
            self._out(pending)
        if not self._opened:
            self._emit('"')
        self._emit('"')


_HEADER_ATTR = re.compile(r'([\w.-]+)\s*=\s*"([^"]*)"')


def _attributes(text: str) -> dict[str, str]:
    return {k: html.unescape(v) for k, v in _HEADER_ATTR.findall(text)}


@lru_cache(maxsize=256)
def _marker_sets(shape: XmlCallShape) -> tuple[MarkerSet, MarkerSet, MarkerSet, MarkerSet, MarkerSet]:
    """The marker sets one call of ``shape`` scans with (built once per shape, not per call)."""
    a = shape.args
    return (MarkerSet((a.key_start, shape.call_end)),
            MarkerSet((*shape.name_end, *((shape.self_closing,) if shape.self_closing else ()))),
            MarkerSet((a.key_end,)), MarkerSet((">",)), MarkerSet((a.value_end, *a.value_breaks)))


def xml_call(shape: XmlCallShape, tools: Mapping[str, Any], cur: Cursor, out: Out,
             name: str | None = None) -> Generator[None, None, bool]:
    """Read one call after its opening marker (the name follows, unless already known),
    up to and including its ``call_end``."""
    a = shape.args
    params, name_ends, key_end, attr_end, value_ends = _marker_sets(shape)
    pending_key = False
    ended = False
    if name is None:
        text, term = yield from cur.read_until(name_ends, limit=512)
        if term is None:
            return False
        name = _attributes(text).get(shape.name_attribute, "") if shape.name_attribute else text.strip()
        if not name:
            return False
        pending_key = term == a.key_start
        ended = term in (shape.call_end, shape.self_closing)
    out.calls.header(name)
    args = ArgsObject(out.calls)
    tool = tools.get(name)
    properties = tool.parameters.get("properties", {}) if tool is not None and isinstance(tool.parameters, Mapping) \
        else {}
    if not isinstance(properties, Mapping):
        properties = {}
    while not ended:
        if not pending_key:
            yield from cur.skip_ws()
            marker = yield from cur.match(params.markers)
            if marker is None:
                return False
            if marker == shape.call_end:
                break
        pending_key = False
        key, term = yield from cur.read_until(key_end, limit=512)
        if term is None:
            return False
        declared_type = None
        if a.key_attribute:
            attrs = _attributes(key)
            key = attrs.get(a.key_attribute, "")
            declared_type = attrs.get(a.type_attribute) if a.type_attribute else None
        key = key.strip()
        kind, nullable = param_kind(properties.get(key))
        if declared_type:
            kind, nullable = (declared_type, nullable) if declared_type != "null" else ("json", True)
        if a.attributes:
            attrs_text, term = yield from cur.read_until(attr_end, limit=512)
            if term is None:
                return False
            if a.string_attribute:
                flag = _attributes(attrs_text).get(a.string_attribute)
                if flag is not None:
                    kind = "string" if flag.lower() == "true" else (kind if kind != "string" else "json")
        if a.value_start:
            yield from cur.skip_ws()
            if not (yield from cur.expect(a.value_start)):
                return False
        args.key(key)
        if not (yield from args.value(kind, a.trim_newline, nullable,
                                      lambda write: _read_value(cur, a, value_ends, write))):
            return False
    args.close()
    return True


def _read_value(cur: Cursor, a: XmlArgs, ends: MarkerSet, write: Callable[[str], None]) -> Generator[None, None, bool]:
    """Stream one value up to its closing tag (consumed), or up to a break marker (left unread)."""
    while True:
        marker = yield from cur.until(ends, write)
        if marker is None:
            return False
        closing = marker == a.value_end
        follow_set = a.value_end_follow if closing else a.value_break_follow
        if follow_set:
            follow = yield from cur.match(follow_set, consume=False)
            if follow is None and not (cur.eof and cur.available == 0):
                write(marker)  # a tag with no structure after it is text of the value
                continue
        if not closing:
            cur.unread(len(marker))
        return True
