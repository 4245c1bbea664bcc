"""How a format *writes* tool calls — the data constrained decoding needs (like SGLang's
``structure_info``, llama.cpp's per-format grammar builders): grammars and structural tags are
generated from it in the format's own spelling, so a constrained model writes exactly what the
detector parses. The property tests render random calls through every format's wire and parse
them back with the same format.

A ``WireFormat`` is a call template plus an arguments encoding. Templates use ``string.Template``
placeholders: ``$name`` (the tool name), ``$args`` (the encoded arguments), ``$index`` (the call's
position 0, 1, 2 …) and ``$ordinal`` (1, 2, 3 …) for formats that number their calls. Encodings:

* ``JsonArgs`` — one JSON object, as ``json.dumps`` writes it;
* ``XmlParams`` — one tagged parameter per key (template with ``$key``, ``$value``, ``$is_string``
  ``true``/``false`` and ``$type``, the value's JSON type); strings are written raw, other values as
  JSON (the reader types them by the tool's schema);
* ``PythonKwargs`` — ``KEY=VALUE, …`` with Python literals (``"…"``, ``True``, ``None``, ``[…]``, ``{…}``);
* ``ObjectNotation`` — Google's ``{key:value,…}`` with strings between a delimiter token.

Every encoding says whether a grammar can be generated for it (``grammar_supported``); a wire
whose encoding cannot be constrained is treated like a format without a wire.
"""

from __future__ import annotations

import html
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from string import Template
from typing import Any, ClassVar

from parsers.core.args import json_type

#: a call to write: the tool's name and its arguments object
Call = tuple[str, Mapping[str, Any]]


def lit(text: str) -> str:
    """Literal text for a template (``$`` doubled)."""
    return text.replace("$", "$$")


def _finite(value: float) -> str:
    if not math.isfinite(value):
        raise ValueError(f"{value!r} is not a JSON number")
    return json.dumps(value)


class ArgsEncoding:
    """How one arguments object is written (base of the encodings below)."""

    #: whether ``app.constraints`` can turn a JSON schema into a grammar for this encoding
    grammar_supported: ClassVar[bool] = True

    def render(self, arguments: Mapping[str, Any]) -> str:
        raise NotImplementedError


@dataclass(frozen=True)
class JsonArgs(ArgsEncoding):
    """The arguments object as JSON text."""

    def render(self, arguments: Mapping[str, Any]) -> str:
        return json.dumps(arguments, ensure_ascii=False, allow_nan=False)


JSON_ARGS = JsonArgs()


@dataclass(frozen=True)
class XmlParams(ArgsEncoding):
    """One tagged parameter per key. String values are written as they are, other values as JSON
    (the reader types values by the tool's JSON schema or by the template's own ``$is_string`` /
    ``$type`` attributes)."""

    param: str  # template of one parameter, e.g. '<parameter=$key>\n$value\n</parameter>\n'
    string_end: str  # what ends a string value in the grammar (its closing tag, with any padding)
    #: texts a string value can never contain (the closing tag, the markers that break a value)
    forbidden: tuple[str, ...] = ()
    #: string values are CDATA sections and other values are XML-escaped (MiniCPM5)
    cdata: bool = False
    #: keys are XML attribute values, written escaped (Kimi K3's ``key="…"``)
    escape_keys: bool = False

    def writable(self, value: object) -> bool:
        """Whether a value can be written: its parameter, as written (padding included), holds no
        more of the ``forbidden`` texts than a plain value's does (Seed-OSS pads a value with a
        newline, so one that starts with ``<parameter=`` becomes a value break)."""
        written, plain = self.render({"k": value}), self.render({"k": "x"})
        return all(written.count(f) == plain.count(f) for f in self.forbidden)

    def render(self, arguments: Mapping[str, Any]) -> str:
        out = []
        for key, value in arguments.items():
            is_string = isinstance(value, str)
            text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, allow_nan=False)
            if self.cdata:
                text = "<![CDATA[" + text.replace("]]>", "]]]]><![CDATA[>") + "]]>" if is_string \
                    else html.escape(text, quote=False)
            out.append(Template(self.param).substitute(
                key=html.escape(key) if self.escape_keys else key, value=text,
                is_string=str(is_string).lower(), type=json_type(value)))
        return "".join(out)


def py_literal(value: object) -> str:
    """A JSON value written as a Python literal (strings double-quoted with JSON's escapes, which
    are Python escapes too)."""
    if value is None:
        return "None"
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _finite(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, Mapping):
        return "{" + ", ".join(json.dumps(str(k), ensure_ascii=False) + ": " + py_literal(v)
                               for k, v in value.items()) + "}"
    if isinstance(value, Sequence):
        return "[" + ", ".join(py_literal(v) for v in value) + "]"
    raise TypeError(f"not a JSON value: {value!r}")


@dataclass(frozen=True)
class PythonKwargs(ArgsEncoding):
    """``KEY=VALUE, …``: Python keyword arguments (the call template supplies the parentheses).
    Keys must be Python identifiers."""

    def render(self, arguments: Mapping[str, Any]) -> str:
        return ", ".join(f"{key}={py_literal(value)}" for key, value in arguments.items())


PYTHON_KWARGS = PythonKwargs()

_BARE_KEY = re.compile(r"[^:,{}\[\]<\s](?:[^:,{}\[\]<]*[^:,{}\[\]<\s])?")


def obj_literal(value: object, delim: str) -> str:
    """A JSON value in Google's object notation: strings between ``delim`` (raw text), bare keys
    where they are plain text (others between ``delim`` too), ``true``/``false``/``null``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _finite(value)
    if isinstance(value, str):
        return delim + value + delim
    if isinstance(value, Mapping):
        return "{" + ",".join(obj_key(str(k), delim) + ":" + obj_literal(v, delim) for k, v in value.items()) + "}"
    if isinstance(value, Sequence):
        return "[" + ",".join(obj_literal(v, delim) for v in value) + "]"
    raise TypeError(f"not a JSON value: {value!r}")


def obj_key(key: str, delim: str) -> str:
    """An object-notation key: bare when it is plain text, else between delimiters."""
    return key if _BARE_KEY.fullmatch(key) else delim + key + delim


@dataclass(frozen=True)
class ObjectNotation(ArgsEncoding):
    """``{key:value,…}`` in Google's object notation (Gemma 4, FunctionGemma); strings sit between
    ``delim`` tokens, unescaped, so a string can never contain ``delim``."""

    delim: str

    def render(self, arguments: Mapping[str, Any]) -> str:
        return obj_literal(dict(arguments), self.delim)


@dataclass(frozen=True)
class WireFormat:
    """How one format writes a run of calls: ``section[0]`` + calls joined by ``separator`` +
    ``section[1]``, each call ``call`` with its placeholders filled."""

    call: str  # template of one call, e.g. '<tool_call>\n{"name": "$name", "arguments": $args}\n</tool_call>'
    section: tuple[str, str] = ("", "")  # text around the run of calls (Kimi, DeepSeek)
    separator: str = ""  # text between two calls
    args: ArgsEncoding = JSON_ARGS
    #: the word that begins tool output, for lazy grammars and structural-tag triggers. ``None``:
    #: derived (see ``trigger``); ``""``: the format has no distinctive word (a bare list or name)
    trigger_word: str | None = None

    @property
    def trigger(self) -> str:
        """The word that begins tool output: ``trigger_word``, else the first line of the section
        opener or of the call's literal prefix."""
        if self.trigger_word is not None:
            return self.trigger_word
        return (self.section[0] or self.call_prefix).strip().split("\n")[0]

    @property
    def call_prefix(self) -> str:
        """The literal text of a call before its first placeholder."""
        for match in Template.pattern.finditer(self.call):
            if match.group("escaped") is None:
                return Template(self.call[:match.start()]).safe_substitute()
        return Template(self.call).safe_substitute()

    @property
    def call_parts(self) -> tuple[str, str]:
        """The call template before and after its ``$args`` placeholder (placeholders unfilled)."""
        for match in Template.pattern.finditer(self.call):
            if "args" in (match.group("named"), match.group("braced")):
                return self.call[:match.start()], self.call[match.end():]
        return self.call, ""

    @property
    def grammar_supported(self) -> bool:
        """Whether a grammar can be generated for this wire (its arguments encoding allows it)."""
        return self.args.grammar_supported

    def split_call(self, name: str, index: int = 0) -> tuple[str, str]:
        """The literal text before and after ``$args`` for one call of ``name``."""
        before, after = self.call_parts
        values = {"name": name, "index": str(index), "ordinal": str(index + 1)}
        return Template(before).safe_substitute(values), Template(after).safe_substitute(values)

    def render(self, calls: Sequence[Call]) -> str:
        """The model output for these calls — what the detector must parse back."""
        parts = []
        for index, (name, arguments) in enumerate(calls):
            before, after = self.split_call(name, index)
            parts.append(before + self.args.render(arguments) + after)
        return self.section[0] + self.separator.join(parts) + self.section[1]
