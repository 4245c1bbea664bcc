"""Writing one call's arguments object as JSON, fragment by fragment, from text that is not JSON.

Formats whose arguments are not written as JSON (XML-style parameters, Python keyword arguments,
object notation, learned tagged parameters) build the object with ``ArgsObject``: ``{`` with the
first key, ``"KEY": `` per key, the value, ``}`` at the end — so a call's fragments always
concatenate to one JSON object. String values stream JSON-escaped as they arrive
(``StringValue``); other values are converted once complete.

**The one typing rule** (``arg_type``) — every format whose argument values are text uses it:

* the parameter's schema gives the JSON types it allows: ``type`` (a name or a list), ``anyOf`` /
  ``oneOf`` / ``allOf`` (the union of the options), a local ``$ref`` (followed), ``enum`` /
  ``const`` (the types of the values), else ``properties`` → object, ``items`` → array; ``null``
  among them (or ``nullable: true``) makes the value nullable. Type names other tools write
  (``int``, ``float``, ``bool``, ``dict``, ``list``, ``varchar`` …) count as their JSON type;
* a value that may only be a string is a string — exactly as written, even when it looks like JSON;
* a union that allows a string and other types (``type: [string, integer]``, ``anyOf`` /
  ``oneOf`` with a string option): text that is a JSON value of one of the other types takes
  that type (``{"a": 1}`` for string|object is an object, ``7`` for string|integer is 7), anything
  else — text that is not JSON (``2 dollars``, ``018956``, ``True``), a JSON string literal, a
  JSON value of a type the union does not name — is the string as written; ``null`` is null only
  where the schema allows null;
* otherwise the text is read as JSON (or a Python literal: ``True``, ``{'a': 1}``) and kept if it
  is one of the allowed types (tried in the schema's order; an integral number is an integer,
  ``true``/``false`` in any case a boolean, ``null``/``None`` null); empty text is ``{}`` / ``[]``
  for an object / array. A value that fits none of them is kept as the model wrote it, a string;
* no schema (a parameter the tool does not describe, or a schema that names no type): the text
  read as JSON, else the text itself as a string (llama.cpp's rule: ``{"a": 1}`` is an object,
  ``42`` a number, ``"hi"`` the string ``hi``, ``hello world`` and ``True`` text) — unless the
  format itself says what the value is (DSML ``string="false"``: JSON; Kimi K3's ``type="…"``).
  Such a declaration also picks among the schema's types when it is one of them
  (``anyOf: [string, integer]`` + ``string="false"`` → integer); the schema wins otherwise.
"""

from __future__ import annotations

import ast
import json
import math
import re
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass
from json.encoder import encode_basestring as _quote  # json.dumps(s, ensure_ascii=False)
from typing import Any

from parsers.core.driver import CallWriter

#: the JSON types a schema can name
KINDS = ("string", "integer", "number", "boolean", "null", "object", "array")
#: a declared kind meaning "some JSON value, not a string" (DSML ``string="false"``)
JSON = "json"
_ALIASES = {
    "str": "string", "text": "string", "varchar": "string", "char": "string", "enum": "string", "uuid": "string",
    "date": "string", "datetime": "string", "time": "string", "timestamp": "string",
    "bool": "boolean", "int": "integer", "long": "integer", "short": "integer", "bigint": "integer",
    "float": "number", "double": "number", "decimal": "number", "real": "number", "numeric": "number",
    "list": "array", "tuple": "array", "set": "array", "arr": "array", "dict": "object", "map": "object",
}
_ALIAS_PREFIX = re.compile(r"(int|uint|long|float|num|list|dict)(?=$|[0-9\[<( ])")
_INTEGER = re.compile(r"[+-]?[0-9]+")
_NUMBER = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_NO = object()  # a value that does not fit a kind


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


def _kind_name(name: object) -> str | None:
    """The JSON type a type name stands for (``int`` → integer, ``varchar(255)`` → string …)."""
    if not isinstance(name, str):
        return None
    if name in KINDS:
        return name
    base = name.split("(", 1)[0].strip().lower()
    if base in KINDS:
        return base
    if base in _ALIASES:
        return _ALIASES[base]
    found = _ALIAS_PREFIX.match(base)
    if found is None:
        return None
    return {"int": "integer", "uint": "integer", "long": "integer", "float": "number", "num": "number",
            "list": "array", "dict": "object"}[found.group(1)]


def json_type(value: object) -> str:
    """The JSON type name of a Python value (``"string"``, ``"integer"``, ``"number"``,
    ``"boolean"``, ``"null"``, ``"object"``, ``"array"``)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, Mapping):
        return "object"
    if isinstance(value, list):
        return "array"
    return "string"


def schema_kinds(schema: Any, root: Mapping[str, Any] | None = None, depth: int = 0) -> tuple[tuple[str, ...], bool]:
    """The JSON types a parameter schema allows, in the schema's order (empty when it names none;
    ``null`` is not listed), and whether it allows ``null`` — see the module docstring."""
    schema = resolve_ref(schema, root)
    if not isinstance(schema, Mapping) or depth > 16:
        return (), False
    kinds: list[str] = []
    nullable = schema.get("nullable") is True

    def add(kind: str | None) -> None:
        nonlocal nullable
        if kind == "null":
            nullable = True
        elif kind is not None and kind not in kinds:
            kinds.append(kind)

    named = schema.get("type")
    for name in named if isinstance(named, list) else [named]:
        add(_kind_name(name))
    if not kinds:
        for combinator in ("anyOf", "oneOf", "allOf"):
            options = schema.get(combinator)
            for option in options if isinstance(options, list) else ():
                sub, sub_nullable = schema_kinds(option, root, depth + 1)
                for kind in sub:
                    add(kind)
                nullable = nullable or sub_nullable
    if not kinds:
        enum = schema.get("enum")
        values: list[Any] = enum if isinstance(enum, list) else [schema["const"]] if "const" in schema else []
        for value in values:
            add(json_type(value))
    if not kinds:
        if "properties" in schema:
            add("object")
        elif "items" in schema or "prefixItems" in schema:
            add("array")
    return tuple(kinds), nullable


@dataclass(frozen=True, slots=True)
class ArgType:
    """What one parameter's value may be (``arg_type``): the JSON types it is read as, tried in
    order (``()``: any JSON value), whether ``null`` is allowed, and whether the format wrote the
    value as JSON (then a string value is a JSON string literal, decoded). ``()`` without
    ``encoded`` is an untyped value (``UNTYPED``): JSON if the text is JSON, else the text.
    ``or_string``: the schema also allows a string (a union): only a JSON value of one of
    ``kinds`` takes that type, any other text is the string as written."""

    kinds: tuple[str, ...] = ("string",)
    nullable: bool = False
    encoded: bool = False
    or_string: bool = False

    @classmethod
    def named(cls, kind: str, nullable: bool = False) -> ArgType:
        """The type one kind name stands for (``JSON``: any JSON value)."""
        return cls((), nullable, True) if kind == JSON else cls((_kind_name(kind) or "string",), nullable)

    @property
    def streams(self) -> bool:
        """A plain string: written as the model writes it, as it arrives."""
        return self.kinds == ("string",) and not self.encoded

    @property
    def kind(self) -> str:
        """The first type (``JSON`` for any value)."""
        return self.kinds[0] if self.kinds else JSON

    def convert(self, text: str) -> Any:
        """The value of ``text``; the text itself (a string) when it fits none of the types."""
        if self.streams:
            return None if self.nullable and text.strip() in ("null", "None") else text
        raw = text.strip()
        if not self.kinds and not self.encoded:  # untyped: JSON, else the text
            try:
                return json.loads(raw, parse_constant=_reject) if raw else text
            except (ValueError, RecursionError):
                return text
        if self.or_string:
            return self._union(text, raw)
        if raw in ("null", "None"):
            return None
        if not raw:
            return {} if "object" in self.kinds[:1] else [] if "array" in self.kinds[:1] else text
        value = _parse(raw)
        for kind in self.kinds or (JSON,):
            fitted = _fit(value, raw, kind)
            if fitted is not _NO:
                return fitted
        return text

    def _union(self, text: str, raw: str) -> Any:
        """A union with a string: a JSON value of one of the other kinds, else the text."""
        if raw == "null" or raw == "None":
            return None if self.nullable else text
        try:
            value = json.loads(raw, parse_constant=_reject)
        except (ValueError, RecursionError):
            return text
        if isinstance(value, str):  # a JSON string literal: the string is what the model wrote
            return text
        for kind in self.kinds:
            fitted = _fit(value, raw, kind)
            if fitted is not _NO:
                return fitted
        return text

    def json(self, text: str) -> str:
        """JSON text for the value of ``text`` (``convert``)."""
        try:
            return json.dumps(self.convert(text), ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError, RecursionError):  # a Python literal JSON cannot spell (a set, bytes)
            return json.dumps(text, ensure_ascii=False)


def arg_type(schema: Any, root: Mapping[str, Any] | None = None, declared: str | None = None) -> ArgType:
    """THE rule typing a parameter value written as text (see the module docstring): from its
    schema (followed through ``root``, the tool's parameters schema, for ``$ref``), and what the
    format itself declares, if anything (``declared``: a type name, or ``JSON`` for DSML's
    ``string="false"``)."""
    kinds, nullable = schema_kinds(schema, root)
    said = declared if declared in (None, JSON) else _kind_name(declared)
    if said == "null":
        said, nullable = None, True
    others = tuple(k for k in kinds if k != "string")
    from_schema = (ArgType(others, nullable, or_string=True) if others and len(others) < len(kinds)
                   else ArgType(kinds, nullable or not kinds))
    if said is None:
        return from_schema
    if not kinds:
        if said == JSON:
            return ArgType((), nullable, True)
        return ArgType((said,), nullable)
    if said == JSON:
        options = tuple(k for k in kinds if k != "string")
        return ArgType(options, nullable) if options else ArgType(("string",), nullable, True)
    if said in kinds:
        return ArgType((said,), nullable)
    return from_schema


#: a value nothing types (no schema, no declaration): JSON if the text is JSON, else the text
UNTYPED = ArgType((), True)


def _parse(raw: str) -> Any:
    """``raw`` read as JSON, else as a Python literal; ``_NO`` when it is neither."""
    try:
        return json.loads(raw, parse_constant=_reject)
    except (ValueError, RecursionError):
        pass
    try:
        return ast.literal_eval(raw)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return _NO


def _fit(value: Any, raw: str, kind: str) -> Any:  # noqa: C901 — the one typing rule: one branch per JSON-schema type a text value can take
    """``value`` (read from ``raw``) as JSON type ``kind``, or ``_NO``."""
    if kind in ("integer", "number"):
        if isinstance(value, bool):
            return _NO
        if isinstance(value, int):
            return value
        if isinstance(value, float):
            if not math.isfinite(value):
                return _NO
            if kind == "number":
                return value
            return int(value) if value.is_integer() else _NO
        try:  # spellings JSON does not accept: zero-padded (07), a leading + or .
            if kind == "integer":
                return int(raw) if _INTEGER.fullmatch(raw) else _NO
            if _NUMBER.fullmatch(raw):
                number = float(raw)
                if math.isfinite(number):
                    return int(number) if number.is_integer() and "." not in raw and "e" not in raw.lower() else number
        except ValueError:  # more digits than Python converts
            pass
        return _NO
    if kind == "boolean":
        if isinstance(value, bool):
            return value
        lowered = raw.lower()
        return lowered == "true" if lowered in ("true", "false") else _NO
    if kind == "object":
        return value if isinstance(value, dict) else _NO
    if kind == "array":
        return list(value) if isinstance(value, list | tuple) else _NO
    if kind == "string":
        return value if isinstance(value, str) else _NO
    if kind == JSON:
        return value
    return _NO


def _reject(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def param_kind(schema: Mapping[str, Any] | None, root: Mapping[str, Any] | None = None) -> tuple[str, bool]:
    """The first JSON type ``arg_type`` reads a parameter as (``string`` when a string is
    allowed or nothing is said), and whether ``null`` is allowed."""
    kinds, nullable = schema_kinds(schema, root)
    return ("string" if not kinds or "string" in kinds else kinds[0]), nullable


def schema_type(schema: Mapping[str, Any] | None, root: Mapping[str, Any] | None = None) -> str:
    return param_kind(schema, root)[0]


def typed_value(text: str, kind: str) -> Any:
    """A value of JSON type ``kind`` (``JSON``: any) from the text the model wrote (``ArgType.convert``)."""
    return ArgType.named(kind).convert(text)


def convert_value(text: str, kind: str) -> str:
    """JSON text for a value of JSON type ``kind`` (``typed_value``)."""
    return ArgType.named(kind).json(text)


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

    def value(self, kind: str | ArgType, trim_newline: bool, nullable: bool,
              read: Callable[[Callable[[str], None]], Generator[None, None, object]], *,
              strip: bool = False) -> Generator[None, None, bool]:
        """One parameter value of type ``kind`` (an ``ArgType``, or a kind name with ``nullable``),
        its text produced by ``read(write)`` (falsy result: the value did not end properly →
        ``False``). Plain strings stream as they arrive; other values are converted
        (``ArgType.json``) once the whole text is in, with one newline trimmed at each end when
        ``trim_newline``, all surrounding whitespace when ``strip``."""
        typed = kind if isinstance(kind, ArgType) else ArgType.named(kind, nullable)
        if typed.streams:
            value = StringValue(self.raw, trim_newline, typed.nullable, strip)
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
        self.raw(typed.json(text))
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
