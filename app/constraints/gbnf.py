"""GBNF grammars (llama.cpp's grammar format) built in code: literals, JSON values typed by a
JSON schema, and "any text up to a terminator".

``Grammar`` collects named rules; ``schema(...)`` returns the name of a rule that accepts exactly
the JSON values a schema allows (objects with their declared properties — required ones in order,
optional ones optional — arrays, strings with length bounds, enums/consts, numbers, integers,
booleans, null, ``anyOf``/``oneOf``, ``allOf`` of objects, local ``$ref``s). Unknown constructs
fall back to any JSON value, so a grammar is never stricter than the schema.

Values are written in a ``Syntax``: JSON by default, or the spelling of a format whose arguments
are not JSON — Python literals (``PYTHON``: pythonic calls, top-level keyword arguments) or
Google's object notation (``object_notation(delim)``: Gemma 4, FunctionGemma).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from parsers.wire import obj_key, obj_literal, py_literal

_SAFE = re.compile(r"[^a-zA-Z0-9-]+")

PRIMITIVES = {
    "ws": '" "?',
    "ws-lines": '[ \\t\\n]{0,32}',
    "json-char": '[^"\\\\\\x7F\\x00-\\x1F] | "\\\\" (["\\\\/bfnrt] | "u" [0-9a-fA-F]{4})',
    "json-string": '"\\"" json-char* "\\""',
    "json-integer": '"-"? ("0" | [1-9] [0-9]{0,17})',
    "json-number": 'json-integer ("." [0-9]{1,20})? ([eE] [-+]? [0-9]{1,4})?',
    "json-boolean": '"true" | "false"',
    "json-null": '"null"',
    "json-value": 'json-object | json-array | json-string | json-number | json-boolean | json-null',
    "json-object": '"{" ws ( json-string ws ":" ws json-value ws ( "," ws json-string ws ":" ws json-value ws )* )? "}"',
    "json-array": '"[" ws ( json-value ws ( "," ws json-value ws )* )? "]"',
}

MAX_OPTIONAL_PERMUTED = 12  # beyond this many optional properties an object falls back to any object


@dataclass(frozen=True)
class Syntax:
    """How JSON values are spelled: primitive rule names (``value``, ``string`` …), extra rules they
    need, how a constant and an object key are written, and whether the top-level object is
    written as keyword arguments (``KEY=VALUE, …``, no braces)."""

    value: str = "json-value"
    object: str = "json-object"
    string: str = "json-string"
    boolean: str = "json-boolean"
    null: str = "json-null"
    #: the character rule of a length-bounded string (``None``: bounds are not expressed)
    string_char: str | None = "json-char"
    rules: Mapping[str, str] = field(default_factory=dict)
    constant: Callable[[Any], str] = lambda v: json.dumps(v, ensure_ascii=False)
    key: Callable[[str], str] = lambda k: json.dumps(k, ensure_ascii=False)
    kwargs: bool = False


JSON = Syntax()
PYTHON = Syntax(
    value="py-value", object="py-object", string="py-string", boolean="py-boolean", null="py-null",
    string_char="py-char", constant=py_literal, kwargs=True, rules={
        "py-char": '[^"\\\\\\x7F\\x00-\\x1F] | "\\\\" (["\\\\bfnrt] | "u" [0-9a-fA-F]{4})',
        "py-string": '"\\"" py-char* "\\""',
        "py-boolean": '"True" | "False"',
        "py-null": '"None"',
        "py-value": "py-object | py-array | py-string | json-number | py-boolean | py-null",
        "py-object": '"{" ws ( py-string ws ":" ws py-value ws ( "," ws py-string ws ":" ws py-value ws )* )? "}"',
        "py-array": '"[" ws ( py-value ws ( "," ws py-value ws )* )? "]"',
        "py-kwargs": '( py-ident "=" py-value ( "," ws py-ident "=" py-value )* )?',
        "py-ident": "[a-zA-Z_] [a-zA-Z0-9_]*",
    })


def object_notation(delim: str) -> Syntax:
    """Google's object notation with string delimiter ``delim``: ``{key:<|"|>text<|"|>,n:3}``."""
    d = literal(delim)
    return Syntax(
        value="obj-value", object="obj-object", string="obj-string", string_char=None,
        constant=lambda v: obj_literal(v, delim), key=lambda k: obj_key(k, delim), rules={
            "obj-string": f"{d} obj-text {d}",
            "obj-text": _text_until(delim),
            "obj-key": f'[^:,{{}}\\[\\]<" \\t\\n]+ | {d} obj-text {d}',
            "obj-value": "obj-object | obj-array | obj-string | json-number | json-boolean | json-null",
            "obj-object": '"{" ws ( obj-key ws ":" ws obj-value ws ( "," ws obj-key ws ":" ws obj-value ws )* )? "}"',
            "obj-array": '"[" ws ( obj-value ws ( "," ws obj-value ws )* )? "]"',
        })


def literal(text: str) -> str:
    """A GBNF string literal for ``text``."""
    out = []
    for ch in text:
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02X}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _char_class_escape(ch: str) -> str:
    if ch in "\\]^-[":
        return "\\" + ch
    if ch == "\n":
        return "\\n"
    if ch == "\t":
        return "\\t"
    if ch == "\r":
        return "\\r"
    return ch


def _text_until(terminator: str) -> str:
    """Rule body: any text that does not contain ``terminator`` (nor end in a proper prefix of it)."""
    if not terminator:
        return "[^\\x00]*"
    alts = []
    for k in range(len(terminator)):
        prefix = terminator[:k]
        head = (literal(prefix) + " ") if prefix else ""
        alts.append(f"{head}[^{_char_class_escape(terminator[k])}]")
    return "( " + " | ".join(alts) + " )*"


class Grammar:
    def __init__(self, syntax: Syntax = JSON) -> None:
        self.rules: dict[str, str] = {}
        self._defs: Mapping[str, Any] = {}
        self._used_primitives: set[str] = set()
        self.syntax = syntax
        self._primitives = {**PRIMITIVES, **syntax.rules}

    # ------------------------------------------------------------------ plumbing

    def add(self, name: str, body: str) -> str:
        """Add (or reuse) a rule; returns its (unique) name."""
        base = _SAFE.sub("-", name).strip("-").lower() or "r"
        candidate, n = base, 1
        while candidate in self.rules and self.rules[candidate] != body:
            n += 1
            candidate = f"{base}-{n}"
        self.rules[candidate] = body
        return candidate

    def primitive(self, name: str) -> str:
        self._used_primitives.add(name)
        return name

    def render(self, root: str) -> str:
        """The grammar text with ``root`` as its start rule."""
        primitives = self._primitives
        needed = set(self._used_primitives)
        for body in (root, *self.rules.values()):
            needed |= {p for p in primitives if re.search(rf"(?<![\w-]){re.escape(p)}(?![\w-])", body)}
        changed = True
        while changed:  # primitives reference each other
            changed = False
            for name in list(needed):
                for other in primitives:
                    if other not in needed and re.search(rf"(?<![\w-]){re.escape(other)}(?![\w-])", primitives[name]):
                        needed.add(other)
                        changed = True
        lines = [f"root ::= {root}"]
        lines += [f"{name} ::= {body}" for name, body in self.rules.items()]
        lines += [f"{name} ::= {primitives[name]}" for name in primitives if name in needed]
        return "\n".join(lines) + "\n"

    # ------------------------------------------------------------------ text

    def text_until(self, terminator: str, name: str = "text") -> str:
        """A rule for any text that does not contain ``terminator`` (nor end in a proper prefix
        of it); the terminator itself is not included."""
        return self.add(name, _text_until(terminator))

    # ------------------------------------------------------------------ JSON schema

    def arguments(self, schema: Any, name: str = "args") -> str:
        """A rule for a call's arguments object: ``schema`` in this syntax, written as keyword
        arguments where the syntax says so."""
        if not self.syntax.kwargs:
            return self.schema(schema, name)
        schema = self._resolve(schema) if isinstance(schema, Mapping) else schema
        if not isinstance(schema, Mapping):
            return self.primitive("py-kwargs")
        return self._object(schema, name, kwargs=True)

    def schema(self, schema: Any, name: str = "value", defs: Mapping[str, Any] | None = None) -> str:  # noqa: C901 — one branch per JSON-schema construct the grammar writer supports
        """A rule accepting the text of values valid for ``schema`` (in the grammar's syntax)."""
        syntax = self.syntax
        if defs is not None:
            self._defs = defs
        if schema is True or not isinstance(schema, Mapping) or not schema:
            return self.primitive(syntax.value)
        if "$defs" in schema or "definitions" in schema:
            self._defs = {**self._defs, **schema.get("$defs", {}), **schema.get("definitions", {})}
        if "$ref" in schema:
            return self._ref(str(schema["$ref"]))
        if "const" in schema:
            return self.add(name + "-const", literal(syntax.constant(schema["const"])))
        if "enum" in schema and isinstance(schema["enum"], list) and schema["enum"]:
            return self.add(name + "-enum", " | ".join(literal(syntax.constant(v)) for v in schema["enum"]))
        for key in ("anyOf", "oneOf"):
            options = schema.get(key)
            if isinstance(options, list) and options:
                alts = [self.schema(o, f"{name}-{i}") for i, o in enumerate(options)]
                return self.add(name, " | ".join(alts))
        if isinstance(schema.get("allOf"), list):
            merged: dict[str, Any] = {"type": "object", "properties": {}, "required": []}
            for part in schema["allOf"]:
                part = self._resolve(part)
                if isinstance(part, Mapping):
                    merged["properties"].update(part.get("properties", {}))
                    merged["required"] += list(part.get("required", []))
            return self.schema(merged, name)
        kind = schema.get("type")
        if isinstance(kind, list):
            alts = [self.schema({**schema, "type": k}, f"{name}-{k}") for k in kind]
            return self.add(name, " | ".join(alts))
        if kind == "object" or (kind is None and "properties" in schema):
            return self._object(schema, name)
        if kind == "array" or (kind is None and "items" in schema):
            return self._array(schema, name)
        if kind == "string":
            return self._string(schema, name)
        if kind == "integer":
            return self.primitive("json-integer")
        if kind == "number":
            return self.primitive("json-number")
        if kind == "boolean":
            return self.primitive(syntax.boolean)
        if kind == "null":
            return self.primitive(syntax.null)
        return self.primitive(syntax.value)

    def _resolve(self, schema: Any) -> Any:
        if isinstance(schema, Mapping) and "$ref" in schema:
            ref = str(schema["$ref"])
            return self._defs.get(ref.rsplit("/", 1)[-1], {})
        return schema

    def _ref(self, ref: str) -> str:
        target = ref.rsplit("/", 1)[-1]
        rule = "ref-" + target
        safe = _SAFE.sub("-", rule).strip("-").lower()
        if safe in self.rules:
            return safe
        self.rules[safe] = self.primitive(self.syntax.value)  # placeholder so recursive references terminate
        body = self.schema(self._defs.get(target, {}), safe + "-body")
        self.rules[safe] = body
        return safe

    def _string(self, schema: Mapping[str, Any], name: str) -> str:
        low = schema.get("minLength")
        high = schema.get("maxLength")
        char = self.syntax.string_char
        if (low is None and high is None) or char is None:
            return self.primitive(self.syntax.string)
        self.primitive(char)
        low = int(low or 0)
        bounds = f"{{{low},{int(high)}}}" if high is not None else f"{{{low},}}"
        return self.add(name + "-string", f'"\\"" {char}{bounds} "\\""')

    def _array(self, schema: Mapping[str, Any], name: str) -> str:
        item = self.schema(schema.get("items", True), name + "-item")
        ws = self.primitive("ws")
        low = int(schema.get("minItems") or 0)
        high = schema.get("maxItems")
        if high is not None and int(high) == 0:
            return self.add(name + "-array", f'"[" {ws} "]"')
        rest_low = max(low - 1, 0)
        rest = f'( "," {ws} {item} {ws} )' + (f"{{{rest_low},{int(high) - 1}}}" if high is not None
                                                 else (f"{{{rest_low},}}" if rest_low else "*"))
        body = f"{item} {ws} {rest}"
        if low == 0:
            body = f"( {body} )?"
        return self.add(name + "-array", f'"[" {ws} {body} "]"')

    def _object(self, schema: Mapping[str, Any], name: str, kwargs: bool = False) -> str:
        """An object (``kwargs``: keyword arguments ``KEY=VALUE, …``, without braces)."""
        props = schema.get("properties")
        ws = self.primitive("ws")
        anything = "py-kwargs" if kwargs else self.syntax.object
        if not isinstance(props, Mapping) or not props:
            if schema.get("additionalProperties") is False or props == {}:
                return '""' if kwargs else self.add(name + "-object", f'"{{" {ws} "}}"')
            return self.primitive(anything)
        required = [k for k in props if k in set(schema.get("required", []))]
        optional = [k for k in props if k not in required]
        pairs = {k: self._pair(k, props[k], f"{name}-{k}", kwargs) for k in props}
        if len(optional) > MAX_OPTIONAL_PERMUTED:
            return self.primitive(anything)
        sep = f'"," {ws}'
        parts = [pairs[k] for k in required]
        body = f" {sep} ".join(parts)
        if optional:
            if required:
                body += " " + " ".join(f"( {sep} {pairs[k]} )?" for k in optional)
            else:
                # the first optional property present starts without a comma
                alts = []
                for i, k in enumerate(optional):
                    tail = " ".join(f"( {sep} {pairs[o]} )?" for o in optional[i + 1:])
                    alts.append(f"{pairs[k]} {tail}".strip())
                body = f"( {' | '.join(alts)} )?"
        if kwargs:
            return self.add(name + "-kwargs", body)
        return self.add(name + "-object", f'"{{" {ws} {body} {ws} "}}"')

    def _pair(self, key: str, schema: Any, name: str, kwargs: bool = False) -> str:
        ws = self.primitive("ws")
        value = self.schema(schema, name)
        if kwargs:
            return self.add(name + "-kv", f"{literal(key + '=')} {value} {ws}")
        return self.add(name + "-kv", f'{literal(self.syntax.key(key))} {ws} ":" {ws} {value} {ws}')
