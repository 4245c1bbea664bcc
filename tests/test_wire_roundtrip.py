"""Every registered format writes what it reads: random calls rendered through a format's ``wire``
parse back identically with the same format's detector — non-streaming and through the shared
streaming harness (one chunk, per character, at and inside markers, random splits).

Calls are random: tool names in the characters every face accepts (``[A-Za-z0-9_./-]``, MCP's:
dotted and slashed names included), nested arguments, unicode, escapes, quotes,
marker text of every registered format inside strings (and, for JSON arguments, inside keys),
empty arguments, several calls (to the same tool or not). Each call's tool is offered with a JSON
schema that types its arguments, which is what makes the round trip well defined for formats whose
arguments are untyped text.

What a format genuinely cannot represent is not generated; the limits, per encoding:

* XML-style parameters (``XmlParams``): values are text, so a string ``"1"`` and a number ``1``
  differ only by the tool's schema (offered here; untyped, ``"1"`` reads back as ``1``); a value cannot contain its closing tag or
  a marker that breaks a value (``wire.args.forbidden``, checked on the parameter as written —
  padding and the JSON of nested values included: ``wire.args.writable``); keys are plain
  identifiers (a key cannot contain the tag that ends it). dots also strips the whitespace around
  a string value (as its reference parser does).
* Python keyword arguments (``PythonKwargs``): keys must be Python identifiers (no ``-``, no
  leading digit); tool names need not be (``user-profile/update(…)`` reads back).
* Object notation (``ObjectNotation``): a string (or key) cannot contain the delimiter token, and an
  object key cannot be empty; keys are identifiers at the top level.
* Nested elements (``NestedXml``, MiniMax-M3): the schema here types the top-level parameters only,
  so inside an object or array a leaf is untyped (JSON if it is JSON text, else a string): only
  containers of strings that are not JSON text (without surrounding spacing), of tag-name keys,
  and not empty, are written (``writable``).
* Functionary v3.2: a tool named ``all`` is the content recipient, not a call; Muse: tools named
  ``self``, ``user`` or ``commentary`` are its reasoning and content recipients.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from parsers import FunctionCallParser, ResponseParser, build_response_parser, fold
from parsers.registry import TOOL_PARSERS, tool_detector_class
from parsers.shapes.nestedxml import NestedXml
from parsers.wire import JsonArgs, ObjectNotation, PythonKwargs, WireFormat, XmlParams
from tests.harness import check_stream_invariants, comparable, held, run_all_chunkings

NAMES = sorted(TOOL_PARSERS)
#: examples per format (each runs every chunking); raise it to hunt: TOOLWIRE_WIRE_EXAMPLES=500
EXAMPLES = int(os.environ.get("TOOLWIRE_WIRE_EXAMPLES", "15"))
KINDS = ("string", "integer", "number", "boolean", "null", "object", "array")
ALL_MARKERS = sorted({m for n in NAMES for m in tool_detector_class(n).markers})
#: text that stresses a writer: quotes, escapes, JSON and Python syntax, entities, CDATA, markers
PIECES = ['"', "'", "\\", '\\"', "\\n", "\n", "\r\n", "\t", "{", "}", "[", "]", ",", ":", "=", "(", ")", "<", ">",
          "/", "&amp;", "&", "]]>", "<![CDATA[", "null", "true", "None", "1", "-2.5e3", "é", "日本語", "🌸", "\u2028",
          "\x00", " ", "$name", "$$", "{{x}}", *ALL_MARKERS]


@dataclass(frozen=True)
class Limits:
    """What one format can write (see the module docstring)."""

    name: str = r"[A-Za-z0-9_./-]{1,20}"  # app.pipeline.validate.TOOL_NAME, shorter
    key: str | None = None  # top-level argument keys: a regex, or None for any text
    forbidden: tuple[str, ...] = ()  # no written value (or nested key) may contain these
    nested_keys_nonempty: bool = False
    strip_strings: bool = False
    excluded_names: tuple[str, ...] = ()
    writable: Callable[[object], bool] | None = None  # whether an argument value can be written


IDENT = r"[A-Za-z_][A-Za-z0-9_]{0,11}"
#: tool names a format reserves for its own recipients
EXCLUDED_NAMES = {"functionary_v32": ("all",), "muse": ("self", "user", "commentary")}


def limits(name: str, wire: WireFormat) -> Limits:
    extra: dict[str, Any] = {"strip_strings": name == "dots",
                             "excluded_names": EXCLUDED_NAMES.get(name, ())}
    if isinstance(wire.args, XmlParams):
        return Limits(key=IDENT, forbidden=wire.args.forbidden, writable=wire.args.writable, **extra)
    if isinstance(wire.args, PythonKwargs):
        return Limits(key=IDENT, **extra)
    if isinstance(wire.args, ObjectNotation):
        return Limits(key=IDENT, forbidden=(wire.args.delim,), nested_keys_nonempty=True, **extra)
    if isinstance(wire.args, NestedXml):
        return Limits(key=IDENT, forbidden=(wire.args.shape.prefix,), writable=wire.args.writable, **extra)
    assert isinstance(wire.args, JsonArgs), wire.args
    return Limits(**extra)


def texts(lim: Limits) -> st.SearchStrategy[str]:
    pieces = [p for p in PIECES if not any(f in p for f in lim.forbidden)]
    text = st.lists(st.one_of(st.text(max_size=6), st.sampled_from(pieces)), max_size=6).map("".join)
    text = text.filter(lambda s: not any(f in s for f in lim.forbidden))
    if lim.strip_strings:
        text = text.map(lambda s: s.strip())  # all whitespace: dots strips as str.strip() does
    return text


def values(lim: Limits, kind: str) -> st.SearchStrategy[Any]:
    text = texts(lim)
    key = text.filter(bool) if lim.nested_keys_nonempty else text
    scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**20, 10**20),
                        st.floats(allow_nan=False, allow_infinity=False), text)
    nested = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                           st.dictionaries(key, inner, max_size=3)), max_leaves=6)
    return {
        "string": text,
        "integer": st.integers(-10**20, 10**20),
        "number": st.floats(allow_nan=False, allow_infinity=False),
        "boolean": st.booleans(),
        "null": st.none(),
        "object": st.dictionaries(key, nested, max_size=3),
        "array": st.lists(nested, max_size=3),
    }[kind]


Call = tuple[str, dict[str, Any]]


@st.composite
def requests(draw: Callable[..., Any], lim: Limits) -> tuple[list[dict[str, Any]], list[Call]]:
    """Tools (each with a typed schema) and 1–3 calls to them."""
    name = st.from_regex(lim.name, fullmatch=True).filter(lambda n: n not in lim.excluded_names)
    key = st.from_regex(lim.key, fullmatch=True) if lim.key else texts(lim)
    tools = draw(st.lists(st.tuples(name, st.dictionaries(key, st.sampled_from(KINDS), max_size=4)),
                          min_size=1, max_size=3, unique_by=lambda t: t[0]))
    calls: list[Call] = []
    for _ in range(draw(st.integers(1, 3))):
        tool, props = draw(st.sampled_from(tools))
        keys = draw(st.lists(st.sampled_from(sorted(props)), unique=True)) if props else []
        args = {k: draw(values(lim, props[k])) for k in keys}
        if lim.writable is not None:
            args = {k: v for k, v in args.items() if lim.writable(v)}
        calls.append((tool, args))
    specs = [{"type": "function", "function": {"name": n, "parameters": {
        "type": "object", "properties": {k: {"type": t} for k, t in props.items()}}}} for n, props in tools]
    return specs, calls


def canonical(arguments: dict[str, Any]) -> str:
    """JSON with sorted keys: ``True`` and ``1``, ``1.0`` and ``1`` stay different."""
    return json.dumps(arguments, sort_keys=True, ensure_ascii=False)


def test_every_registered_format_has_a_wire() -> None:
    missing = [n for n in NAMES if tool_detector_class(n).wire is None]
    assert not missing, missing


@pytest.mark.parametrize("name", NAMES)
def test_wire_round_trips_through_its_detector(name: str) -> None:
    wire = tool_detector_class(name).wire
    assert wire is not None
    lim = limits(name, wire)

    @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
    @given(request=requests(lim))
    def check(request: tuple[list[dict[str, Any]], list[Call]]) -> None:
        _round_trip(name, *request)

    check()


def _round_trip(name: str, specs: list[dict[str, Any]], calls: list[Call]) -> None:
    """``calls`` rendered by ``name``'s wire parse back the same, whole and in every chunking."""
    cls = tool_detector_class(name)
    assert cls.wire is not None
    markers = tuple(cls.markers)
    text = cls.wire.render(calls)
    expected = [(n, canonical(a)) for n, a in calls]

    def make() -> ResponseParser:
        return build_response_parser(specs, name, None)

    whole, streams = run_all_chunkings(make, text, markers)
    assert [(c.name, canonical(json.loads(c.arguments))) for c in whole.calls] == expected, text
    assert whole.content == "" and whole.reasoning == "", text
    for chunking, events in streams.items():
        assert comparable(fold(events)) == comparable(whole), (chunking, text)
        assert comparable(fold(held(events))) == comparable(whole), (chunking, text)
        assert not check_stream_invariants(events, markers), (chunking, text)


#: tool names at the edges of the rule every face applies (``app.pipeline.validate.TOOL_NAME``):
#: MCP's dotted and slashed names, a name that repeats a format's own prefix (Kimi's and Harmony's
#: ``functions.``), names that are punctuation only or start with a digit, the longest name
EDGE_NAMES = ("weather.get", "Calendar.create_event", "user-profile/update", "admin.tools.list", "functions.f",
              "a.b/c-d_e", ".", "/", "-", "9lives", "x" * 128)


@pytest.mark.parametrize("name", NAMES)
def test_every_accepted_tool_name_round_trips(name: str) -> None:
    """Each edge name, offered as a tool, written by the format and read back as the same name —
    two calls, with and without arguments, in one chunk, per character and in random splits."""
    for tool in EDGE_NAMES:
        specs = [{"type": "function", "function": {"name": tool, "parameters": {
            "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}}]
        _round_trip(name, specs, [(tool, {"city": "Paris", "days": 3}), (tool, {})])


def _parsed(name: str, calls: list[Call], tools: list[dict[str, Any]] | None = None) -> list[tuple[str, Any]]:
    wire = tool_detector_class(name).wire
    assert wire is not None
    _, items = FunctionCallParser(tools or [], name).parse_non_stream(wire.render(calls))
    return [(c.name, json.loads(c.parameters)) for c in items]


@pytest.mark.parametrize(("name", "call"), [
    ("glm45", ("f", {"s": "42"})),  # untyped text: without a schema a string that is JSON reads back as JSON
    ("qwen3_coder", ("f", {"s": "a\n</function>\nb"})),  # a value break inside a value
    ("seed_oss", ("f", {"s": "a\n<parameter=x"})),  # a break inside a value
    ("minimax-m2", ("f", {"s": "a</parameter>b"})),  # the closing tag inside a value
    ("pythonic", ("f", {"a-b": 1})),  # a key that is not a Python identifier
    ("gemma4", ("f", {"s": 'a<|"|>b'})),  # the string delimiter inside a string
    ("functionary_v32", ("all", {})),  # the content recipient
    ("muse", ("user", {})),  # the content recipient
])
def test_limits_are_the_formats(name: str, call: Call) -> None:
    """The limits in the module docstring are the formats', not the test's: each case reads back wrong."""
    assert _parsed(name, [call]) != [call]
