"""Tool calls whose arguments are XML-style parameters, converted to JSON as they stream.

    <function=NAME><parameter=KEY>VALUE</parameter>…</function>                (Qwen3-Coder)
    NAME<arg_key>KEY</arg_key><arg_value>VALUE</arg_value>…</tool_call>         (GLM 4.5+)
    <invoke name="NAME"><parameter name="KEY">VALUE</parameter>…</invoke>       (MiniMax-M2, Step3)
    <｜DSML｜invoke name="NAME"><｜DSML｜parameter name="KEY" string="true">…     (DeepSeek V3.2+)

The arguments object is written incrementally: ``{`` with the first parameter, then
``"KEY": `` and — for string parameters — the JSON-escaped value as it arrives (the closing tag
is held back by the marker scanner), or — for other types — the converted value once the closing
tag arrives; ``}`` at the end. Values are typed by the core's one rule
(``parsers.core.args.arg_type``): the tool's JSON schema, and what the format declares where it
has a declaration (DSML's ``string="…"``, Kimi K3's ``type="…"``, K2 Horizon's type tag); a
parameter neither describes is a string. Every call's fragments concatenate to one JSON object.
Whatever encloses the parameters — a call's closing tag (``xml_call``) or the end of a
Harmony-like message (``xml_params_until``) — each one is read by ``xml_param``.

``tagged_xml`` and ``wrapped_xml`` declare whole formats; the way they write calls (``xml_wire``)
is derived from the same ``XmlCallShape``: the name and parameters in their tags, string values
raw (padded with a newline where ``trim_newline`` strips one), other values as JSON.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass
from functools import lru_cache

from parsers.core.args import JSON, ArgsObject, arg_type
from parsers.core.cursor import Cursor
from parsers.core.driver import Out
from parsers.core.markers import MarkerSet
from parsers.format import CallContext, ToolFormat
from parsers.shapes.sections import Sections, as_tuple, calls_format, section_pairs
from parsers.tools import ToolSpec
from parsers.wire import WireFormat, XmlParams, lit


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
    #: optional tag pair between key and value naming the value's JSON type
    #: (K2 Horizon: ``<ifm|arg_type>integer</ifm|arg_type>``); read, not written
    type_tag: tuple[str, str] | None = None
    trim_newline: bool = False  # strip one newline after the opening and one before the closing tag
    strip: bool = False  # strip all whitespace around a value (dots)
    unquote_key: bool = False  # the key may be quoted ('"k"', "'k'", or bare): one pair of quotes is dropped
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
    unquote_name: bool = False  # the name may be quoted ('"f"', "'f'", or bare): one pair of quotes is dropped


_HEADER_ATTR = re.compile(r'([\w.-]+)\s*=\s*"([^"]*)"')


def _attributes(text: str) -> dict[str, str]:
    return {k: html.unescape(v) for k, v in _HEADER_ATTR.findall(text)}


def _unquote(text: str) -> str:
    """``text`` without one pair of matching quotes around it."""
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        return text[1:-1].strip()
    return text


@lru_cache(maxsize=256)
def _marker_sets(shape: XmlCallShape) -> tuple[MarkerSet, MarkerSet]:
    """The marker sets one call of ``shape`` scans with between its parameters (built once per
    shape, not per call): a parameter or the call's end, and what ends the name."""
    return (MarkerSet((shape.args.key_start, shape.call_end)),
            MarkerSet((*shape.name_end, *((shape.self_closing,) if shape.self_closing else ()))))


@dataclass(frozen=True)
class _ParamSets:
    """The marker sets one parameter of an ``XmlArgs`` is read with."""

    key_end: MarkerSet
    attr_end: MarkerSet  # the ">" after attributes
    type_end: MarkerSet | None  # the closing type tag
    value_ends: MarkerSet  # the closing tag and the breaks


@lru_cache(maxsize=256)
def _param_sets(a: XmlArgs) -> _ParamSets:
    return _ParamSets(MarkerSet((a.key_end,)), MarkerSet((">",)), MarkerSet((a.type_tag[1],)) if a.type_tag else None,
                      MarkerSet((a.value_end, *a.value_breaks)))


def xml_call(shape: XmlCallShape, tools: Mapping[str, ToolSpec], cur: Cursor, out: Out,
             name: str | None = None) -> Generator[None, None, bool]:
    """Read one call after its opening marker (the name follows, unless already known),
    up to and including its ``call_end``."""
    a = shape.args
    params, name_ends = _marker_sets(shape)
    pending_key = False
    ended = False
    if name is None:
        text, term = yield from cur.read_until(name_ends, limit=512)
        if term is None:
            return False
        name = _attributes(text).get(shape.name_attribute, "") if shape.name_attribute else text.strip()
        if shape.unquote_name:
            name = _unquote(name)
        if not name:
            return False
        pending_key = term == a.key_start
        ended = term in (shape.call_end, shape.self_closing)
    out.calls.header(name)
    args = ArgsObject(out.calls)
    tool = tools.get(name)
    while not ended:
        if not pending_key:
            yield from cur.skip_ws()
            marker = yield from cur.match(params.markers)
            if marker is None:
                return False
            if marker == shape.call_end:
                break
        pending_key = False
        if not (yield from xml_param(a, tool, cur, args)):
            return False
    args.close()
    return True


def xml_params_until(a: XmlArgs, tool: ToolSpec | None, cur: Cursor, out: Out, ends: tuple[str, ...],
                     open_end: bool = False) -> Generator[None, None, tuple[bool, str | None]]:
    """The parameters of a call whose header is already written, for formats whose calls end at
    one of several markers rather than a closing tag (Harmony-like envelopes). Returns ``(True,
    end)`` at one of ``ends`` (consumed); with ``open_end``, ``(True, None)`` where the output ends
    after a parameter (a stop token the text never shows), unless it was cut off; else
    ``(False, None)``. The arguments object is closed when the call is complete."""
    markers = (a.key_start, *ends)
    args = ArgsObject(out.calls)
    while True:
        yield from cur.skip_ws()
        marker = yield from cur.match(markers)
        if marker is None:
            if open_end and cur.eof and cur.available == 0 and not cur.truncated:
                args.close()
                return True, None
            return False, None
        if marker != a.key_start:
            args.close()
            return True, marker
        if not (yield from xml_param(a, tool, cur, args)):
            return False, None


def xml_param(a: XmlArgs, tool: ToolSpec | None, cur: Cursor, args: ArgsObject) -> Generator[None, None, bool]:
    """One parameter after its ``key_start`` — the one parameter reader of every XML-style format:
    the key (or its key attribute, unquoted with ``unquote_key``), attributes, an optional type tag,
    and the value, written to ``args``. The value is typed by the core's one rule (``arg_type``):
    the tool's schema, with what a type attribute or tag (K3, K2 Horizon) or a string attribute
    (DSML) declares; ``strip`` / ``trim_newline`` say what whitespace around it is markup."""
    sets = _param_sets(a)
    key, term = yield from cur.read_until(sets.key_end, limit=512)
    if term is None:
        return False
    declared_type = None
    if a.key_attribute:
        attrs = _attributes(key)
        key = attrs.get(a.key_attribute, "")
        declared_type = attrs.get(a.type_attribute) if a.type_attribute else None
    key = key.strip()
    if a.unquote_key:
        key = _unquote(key)
    if a.attributes:
        attrs_text, term = yield from cur.read_until(sets.attr_end, limit=512)
        if term is None:
            return False
        if a.string_attribute:
            flag = _attributes(attrs_text).get(a.string_attribute)
            if flag is not None:
                declared_type = "string" if flag.lower() == "true" else JSON
    if a.type_tag and sets.type_end is not None:
        yield from cur.skip_ws()
        if (yield from cur.expect(a.type_tag[0])):
            written, term = yield from cur.read_until(sets.type_end, limit=64)
            if term is None:
                return False
            if written.strip():
                declared_type = written.strip()
    typed = arg_type(tool.param_schema(key) if tool is not None else None,
                     tool.parameters if tool is not None else None, declared_type)
    if a.value_start:
        yield from cur.skip_ws()
        if not (yield from cur.expect(a.value_start)):
            return False
    args.key(key)
    return (yield from args.value(typed, a.trim_newline, typed.nullable,
                                  lambda write: _read_value(cur, a, sets.value_ends, write), strip=a.strip))


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


# ------------------------------------------------------------------------------ declaring formats


def xml_params(args: XmlArgs, newlines: bool = True) -> XmlParams:
    """How parameters of ``args`` are written: key (or key attribute, with the type attribute),
    the string attribute, the value (padded with one newline on each side where ``trim_newline``
    strips one), the closing tag; one per line with ``newlines``."""
    if args.key_attribute:
        typed = f' {args.type_attribute}="$type"' if args.type_attribute else ""
        head = lit(args.key_start) + f' {args.key_attribute}="$key"' + typed + lit(args.key_end)
    else:
        head = lit(args.key_start) + "$key" + lit(args.key_end)
    if args.string_attribute:
        head += f' {args.string_attribute}="$is_string"'
    if args.attributes:
        head += ">"
    if args.value_start:
        head += ("\n" if newlines else "") + lit(args.value_start)
    pad = "\n" if args.trim_newline else ""
    param = head + pad + "$value" + pad + lit(args.value_end) + ("\n" if newlines else "")
    return XmlParams(param, string_end=pad + args.value_end, forbidden=(args.value_end, *args.value_breaks),
                     escape_keys=bool(args.key_attribute))


def xml_call_template(call_start: str, shape: XmlCallShape, newlines: bool = True, attributes: str = "") -> str:
    """How one call of ``shape`` is written (``$name``, ``$args``; ``attributes`` — a template —
    follows the name attribute: Kimi K3's `` index="$ordinal"``)."""
    if shape.name_attribute:
        head = lit(call_start) + f' {shape.name_attribute}="$name"' + attributes + lit(shape.name_end[0])
    else:
        name_end = shape.name_end[0] if newlines or not shape.name_end[0].isspace() else ""
        head = lit(call_start) + "$name" + attributes + lit(name_end)
    if newlines and not head.endswith("\n"):
        head += "\n"
    return head + "$args" + lit(shape.call_end)


def _markers(shape: XmlCallShape) -> tuple[str, ...]:
    a = shape.args
    key_end = (a.key_end,) if a.key_end.startswith("</") else ()
    return (shape.call_end, a.key_start, *key_end, *(a.type_tag or ()), a.value_start, a.value_end)


def xml_wire(call_start: str, shape: XmlCallShape, section: Sections | None = None, *, newlines: bool = True,
             attributes: str = "", wrapper: tuple[str, str] | None = None) -> WireFormat:
    """How a format of ``shape`` writes a run of calls (the first section, if any; one call per
    ``wrapper`` if given; one per line with ``newlines``)."""
    nl = "\n" if newlines else ""
    call = xml_call_template(call_start, shape, newlines, attributes)
    if wrapper is not None:
        call = lit(wrapper[0]) + nl + call + nl + lit(wrapper[1])
    pairs = section_pairs(section)
    around = (lit(pairs[0][0]) + nl, nl + lit(pairs[0][1])) if pairs else ("", "")
    return WireFormat(call, section=around, separator=nl, args=xml_params(shape.args, newlines))


def tagged_xml(call_start: str | tuple[str, ...], shape: XmlCallShape, section: Sections | None = None, *,
               bare_calls: bool = False, newlines: bool = True, attributes: str = "",
               markers: tuple[str, ...] = (), trim_around_calls: bool = True) -> ToolFormat:
    """Calls with XML-style parameters after ``call_start``, optionally inside a section;
    ``markers`` adds marker texts the shape does not spell (DSML's ``｜DSML｜``)."""
    starts = as_tuple(call_start)

    def read_call(ctx: CallContext, cur: Cursor, out: Out, marker: str) -> Generator[None, None, bool]:
        return (yield from xml_call(shape, ctx.tools_by_name, cur, out))

    wire = xml_wire(starts[0], shape, section, newlines=newlines, attributes=attributes)
    return calls_format(starts, read_call, wire=wire, section=section, bare_calls=bare_calls,
                        markers=(*_markers(shape), *markers), trim_around_calls=trim_around_calls)


def wrapped_xml(wrapper: tuple[str, str], call_start: str, shape: XmlCallShape, *, newlines: bool = True) -> ToolFormat:
    """One call per wrapper — ``WRAPPER_OPEN CALL_START … CALL_END WRAPPER_CLOSE`` (Qwen3-Coder's
    ``<tool_call><function=…>``, Seed-OSS's ``<seed:tool_call><function=…>``). A bare call without
    the wrapper is accepted too; a stray closing wrapper after it is markup."""
    opener, closer = wrapper

    def read_call(ctx: CallContext, cur: Cursor, out: Out, marker: str) -> Generator[None, None, bool]:
        if marker == opener:
            yield from cur.skip_ws()
            if not (yield from cur.expect(call_start)):
                return False
        if not (yield from xml_call(shape, ctx.tools_by_name, cur, out)):
            return False
        if marker == opener:
            return (yield from cur.closing(closer))
        yield from cur.skip_ws()
        yield from cur.match((closer,))
        return True

    wire = xml_wire(call_start, shape, newlines=newlines, wrapper=wrapper)
    return calls_format((opener, call_start), read_call, wire=wire, markers=(closer, *_markers(shape)))
