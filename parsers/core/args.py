"""Writing one call's arguments object as JSON, fragment by fragment, from text that is not JSON.

Formats whose arguments are not written as JSON (XML-style parameters, Python keyword arguments,
object notation, learned tagged parameters) build the object with ``ArgsObject``: ``{`` with the
first key, ``"KEY": `` per key, the value, ``}`` at the end — so a call's fragments always
concatenate to one JSON object. String values stream JSON-escaped as they arrive
(``StringValue``); other values are converted once complete (``convert_value``), typed by the
tool's JSON schema (``param_kind``).
"""

from __future__ import annotations

import ast
import json
import math
from collections.abc import Callable, Generator, Mapping
from json.encoder import encode_basestring as _quote  # json.dumps(s, ensure_ascii=False)
from typing import Any

from parsers.core.driver import CallWriter


def resolve_ref(schema: Any, root: Mapping[str, Any] | None, depth: int = 0) -> Mapping[str, Any] | None:
    """``schema`` with a local ``$ref`` (``#/$defs/X``, ``#/definitions/X``, any ``#/…`` pointer
    into ``root``, the tool's parameters schema) followed; ``None`` when it is not a schema or the
    reference cannot be followed (then the value is untyped)."""
    while isinstance(schema, Mapping) and isinstance(schema.get("$ref"), str) and depth < 16:
        ref: str = schema["$ref"]
        if not ref.startswith("#") or root is None:
            return None
        target: Any = root
        for part in ref[1:].split("/")[1:] if ref != "#" else []:
            part = part.replace("~1", "/").replace("~0", "~")
            target = target.get(part) if isinstance(target, Mapping) else None
        schema, depth = target, depth + 1
    return schema if isinstance(schema, Mapping) and "$ref" not in schema else None


def param_kind(schema: Mapping[str, Any] | None, root: Mapping[str, Any] | None = None) -> tuple[str, bool]:
    """The JSON type a parameter schema asks for, and whether it allows ``null`` — the one rule
    every format whose values are text uses. ``type`` (a list: the first non-null type, ``string``
    if a string is allowed), ``anyOf`` / ``oneOf`` / ``allOf`` (the same over the options), a
    local ``$ref`` into ``root`` (followed), ``enum`` (the type of its values), ``properties`` /
    ``items`` (object / array); ``"string"`` when nothing says (an untyped value stays text)."""
    schema = resolve_ref(schema, root)
    if not isinstance(schema, Mapping):
        return "string", False
    kind = schema.get("type")
    if isinstance(kind, list):
        kinds = [k for k in kind if k != "null"]
        return ("string" if not kinds or "string" in kinds else str(kinds[0])), "null" in kind
    if isinstance(kind, str):
        return kind, kind == "null"
    for combinator in ("anyOf", "oneOf", "allOf"):
        resolved = (resolve_ref(o, root) for o in schema.get(combinator) or () if isinstance(o, Mapping))
        options = [o for o in resolved if o is not None]
        if options:
            subs = [param_kind(o, root) for o in options]
            nullable = any(o.get("type") == "null" for o in options)
            kinds = [k for (k, _), o in zip(subs, options) if o.get("type") != "null"]
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


def schema_type(schema: Mapping[str, Any] | None, root: Mapping[str, Any] | None = None) -> str:
    return param_kind(schema, root)[0]


def typed_value(text: str, kind: str) -> Any:
    """A non-string parameter value of JSON type ``kind`` from the text the model wrote; the text
    itself (a string) when it does not parse as that type (the model's text is never dropped).
    ``null`` / ``None`` is null; an empty object or array value is ``{}`` / ``[]``."""
    raw = text.strip()
    if raw in ("null", "None"):
        return None
    if not raw and kind in ("object", "array"):
        return {} if kind == "object" else []
    try:
        if kind == "integer":
            return int(raw)
        if kind == "number":
            number = float(raw)
            if not math.isfinite(number):
                raise ValueError(raw)
            return int(number) if number.is_integer() and "." not in raw and "e" not in raw.lower() else number
        if kind == "boolean":
            lowered = raw.lower()
            if lowered in ("true", "false"):
                return lowered == "true"
            raise ValueError(raw)
        return json.loads(raw, parse_constant=_reject)
    except (ValueError, OverflowError, RecursionError):
        pass
    try:  # Python literals: {'a': 1}, [1, 2], True, None
        return ast.literal_eval(raw)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return text


def _reject(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def convert_value(text: str, kind: str) -> str:
    """JSON text for a non-string parameter value (``typed_value``)."""
    try:
        return json.dumps(typed_value(text, kind), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError, RecursionError):  # a Python literal JSON cannot spell (a set, bytes)
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
              read: Callable[[Callable[[str], None]], Generator[None, None, object]], *,
              strip: bool = False) -> Generator[None, None, bool]:
        """One parameter value of schema ``kind``, its text produced by ``read(write)`` (falsy
        result: the value did not end properly → ``False``). Strings stream as they arrive;
        other kinds are converted (``convert_value``) once the whole text is in, with one
        newline trimmed at each end when ``trim_newline``, all surrounding whitespace when ``strip``."""
        if kind == "string":
            value = StringValue(self.raw, trim_newline, nullable, strip)
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
        if strip:
            text = text.strip()
        self.raw(convert_value(text, kind))
        return True

    def close(self) -> None:
        self._calls.args("}" if self._count else "{}")


class StringValue:
    """Streams one string value, JSON-escaped, optionally trimming one newline at each end, or
    (``strip``) all whitespace at both ends: a run of whitespace is held until text follows it.

    When the parameter may be ``null``, the first characters are held while they could still
    spell ``null`` (at most four), so a literal ``null`` becomes JSON null and anything else a
    string — still streamed as it arrives."""

    __slots__ = ("_emit", "_held", "_maybe_null", "_opened", "_space", "_started", "_strip", "_trim")

    def __init__(self, emit: Callable[[str], None], trim_newline: bool, nullable: bool, strip: bool = False) -> None:
        self._emit = emit
        self._trim = trim_newline
        self._strip = strip
        self._space: list[str] = []  # whitespace held back (strip): released only if text follows
        self._started = False
        self._held = ""
        self._maybe_null: str | None = "" if nullable else None
        self._opened = False

    def write(self, text: str) -> None:
        if not text:
            return
        if self._strip:
            text = self._stripped(text)
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

    def _stripped(self, text: str) -> str:
        """``text`` without the value's leading whitespace and with its trailing whitespace held
        back; whitespace held from before is released in front of text that follows it."""
        if not self._started:
            text = text.lstrip()
            if not text:
                return ""
            self._started = True
        body = text.rstrip()
        if not body:
            self._space.append(text)
            return ""
        tail = text[len(body):]
        if self._space:
            body = "".join(self._space) + body
            self._space.clear()
        if tail:
            self._space.append(tail)
        return body

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
            pending = self._maybe_null
            self._maybe_null = None
            self._out(pending)
        if not self._opened:
            self._emit('"')
        self._emit('"')
