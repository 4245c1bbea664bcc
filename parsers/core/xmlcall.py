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
import json
import re
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass
from typing import Any

from parsers.core.cursor import Cursor
from parsers.core.markers import MarkerSet
from parsers.core.program import CallWriter, Out


@dataclass(frozen=True)
class XmlArgs:
    """How one parameter is written."""

    key_start: str  # "<parameter=" | "<arg_key>" | '<parameter name="'
    key_end: str  # ">" | "</arg_key>" | '">' | '"' (then attributes up to ">")
    value_end: str  # "</parameter>" | "</arg_value>"
    value_start: str = ""  # "<arg_value>" where the value has its own opening tag
    attributes: bool = False  # after key_end, attributes run up to ">" (DSML: ` string="true">`)
    string_attribute: str | None = None  # attribute saying whether the value is a string
    trim_newline: bool = False  # strip one newline after the opening and one before the closing tag


@dataclass(frozen=True)
class XmlCallShape:
    """How one call is written, after its opening marker."""

    name_end: tuple[str, ...]  # what ends the name: (">",) | ('">',) | ("\n", "<arg_key>", "</tool_call>")
    call_end: str  # "</function>" | "</invoke>" | "</tool_call>"
    args: XmlArgs


_ATTR = re.compile(r'([\w.-]+)\s*=\s*"([^"]*)"')


def schema_type(schema: Mapping[str, Any] | None) -> str:
    """The JSON type a parameter schema asks for ('string' when unknown or when string is allowed)."""
    if not isinstance(schema, Mapping):
        return "string"
    kind = schema.get("type")
    if isinstance(kind, list):
        kinds = [k for k in kind if k != "null"]
        return "string" if not kinds or "string" in kinds else str(kinds[0])
    if isinstance(kind, str):
        return kind
    for combinator in ("anyOf", "oneOf"):
        options = schema.get(combinator)
        if isinstance(options, list):
            kinds = [schema_type(o) for o in options if isinstance(o, Mapping) and o.get("type") != "null"]
            return "string" if not kinds or "string" in kinds else kinds[0]
    if "enum" in schema and all(isinstance(v, str) for v in schema["enum"]):
        return "string"
    if "properties" in schema:
        return "object"
    if "items" in schema:
        return "array"
    return "string"


def convert_value(text: str, kind: str) -> str:
    """JSON text for a non-string parameter value; falls back to a JSON string when it does not
    parse as the declared type (the model's text is never dropped)."""
    raw = text.strip()
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
        if kind == "null" and raw.lower() in ("null", "none"):
            return "null"
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
    return json.dumps(text, ensure_ascii=False)[1:-1]


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

    def close(self) -> None:
        self._calls.args("}" if self._count else "{}")


class _StringValue:
    """Streams one string value, JSON-escaped, optionally trimming one newline at each end."""

    __slots__ = ("_emit", "_trim", "_started", "_held")

    def __init__(self, emit: Callable[[str], None], trim_newline: bool) -> None:
        self._emit = emit
        self._trim = trim_newline
        self._started = False
        self._held = ""

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
            self._emit(escape(text))


def xml_call(shape: XmlCallShape, tools: Mapping[str, Any], cur: Cursor, out: Out,
             name: str | None = None) -> Generator[None, None, bool]:
    """Read one call after its opening marker (the name follows, unless already known)."""
    a = shape.args
    params = MarkerSet((a.key_start, shape.call_end))
    pending_key = False
    if name is None:
        text, term = yield from cur.read_until(MarkerSet(shape.name_end), limit=256)
        name = text.strip()
        if term is None or not name:
            return False
        pending_key = term == a.key_start
        ended = term == shape.call_end
    else:
        ended = False
    out.calls.header(name)
    args = ArgsObject(out.calls)
    tool = tools.get(name)
    properties = tool.parameters.get("properties", {}) if tool is not None and isinstance(tool.parameters, Mapping) \
        else {}
    key_end = MarkerSet((a.key_end,))
    attr_end = MarkerSet((">",))
    value_end = MarkerSet((a.value_end,))
    while not ended:
        if not pending_key:
            yield from cur.skip_ws()
            marker = yield from cur.match(params.markers)
            if marker is None:
                return False
            if marker == shape.call_end:
                break
        pending_key = False
        key, term = yield from cur.read_until(key_end, limit=256)
        if term is None:
            return False
        key = key.strip()
        kind = schema_type(properties.get(key) if isinstance(properties, Mapping) else None)
        if a.attributes:
            attrs, term = yield from cur.read_until(attr_end, limit=256)
            if term is None:
                return False
            if a.string_attribute:
                found = dict(_ATTR.findall(attrs))
                flag = found.get(a.string_attribute)
                if flag is not None:
                    kind = "string" if flag.lower() == "true" else (kind if kind != "string" else "json")
        if a.value_start:
            yield from cur.skip_ws()
            if not (yield from cur.expect(a.value_start)):
                return False
        args.key(key)
        if kind == "string":
            args.raw('"')
            value = _StringValue(args.raw, a.trim_newline)
            if (yield from cur.until(value_end, value.write)) is None:
                return False
            args.raw('"')
        else:
            parts: list[str] = []
            if (yield from cur.until(value_end, parts.append)) is None:
                return False
            text = "".join(parts)
            if a.trim_newline:
                text = text[1:] if text.startswith("\n") else text
                text = text[:-1] if text.endswith("\n") else text
            args.raw(convert_value(text, kind))
    args.close()
    return True
