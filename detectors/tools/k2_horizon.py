"""K2 Horizon (IFM, SGLang's ``k2_horizon``) tool calls: ``<ifm|…>`` tags, key/value or JSON.

    <ifm|tool_calls>
    <ifm|tool_call>get_weather
    <ifm|arg_key>city</ifm|arg_key>
    <ifm|arg_value>Seoul</ifm|arg_value>
    </ifm|tool_call>
    </ifm|tool_calls>

The template's ``tool_call_format`` picks one of three spellings of a call, told apart by what
follows ``<ifm|tool_call>``: the name and key/value tags (``xml``), the same with
``<ifm|arg_type>T</ifm|arg_type>`` before each value (``xml_typed``: the written type picks among
the schema's types, and types a value the schema leaves open), or a
JSON call object ``{"name": …, "arguments": {…}}`` (``json``; a ``[…]`` list of them is read too).
Key/value values are typed by the core's one rule (``arg_type``: the tool's JSON schema first); JSON arguments stream
through as written. The ``<ifm|tool_calls>`` group is optional; text between calls inside it is
markup.
"""

from __future__ import annotations

from collections.abc import Generator

from parsers.declare import (
    DEFAULT_SHAPE,
    CallContext,
    Cursor,
    MarkerSet,
    Out,
    ToolCallDetector,
    XmlArgs,
    XmlCallShape,
    calls_format,
    json_call,
    xml_call,
    xml_wire,
)

CALLS, CALLS_END = "<ifm|tool_calls>", "</ifm|tool_calls>"
CALL, CALL_END = "<ifm|tool_call>", "</ifm|tool_call>"
SHAPE = XmlCallShape(
    name_end=("\n", "<ifm|arg_key>", CALL_END),
    call_end=CALL_END,
    args=XmlArgs("<ifm|arg_key>", "</ifm|arg_key>", "</ifm|arg_value>", value_start="<ifm|arg_value>",
                 type_tag=("<ifm|arg_type>", "</ifm|arg_type>"),
                 value_breaks=(CALL_END,), value_break_follow=("\n", CALL, CALLS_END)),
)
_STOP = MarkerSet((CALLS, CALLS_END, CALL, CALL_END))


def _json_calls(cur: Cursor, out: Out) -> Generator[None, None, bool]:
    """One call object, or a list of them; every call but the last is ended here."""
    if (yield from cur.peek()) == "{":
        return (yield from json_call(cur, out, DEFAULT_SHAPE, _STOP))
    yield from cur.expect("[")
    while True:
        yield from cur.skip_ws()
        if not (yield from json_call(cur, out, DEFAULT_SHAPE, _STOP)):
            return False
        sep = yield from cur.list_separator("]")
        if sep != ",":
            return sep == "]"
        if not out.calls.end(True):
            return False
        out.calls.begin(sep)


def _read_call(ctx: CallContext, cur: Cursor, out: Out, marker: str) -> Generator[None, None, bool]:
    yield from cur.skip_ws()
    if (yield from cur.peek()) in ("{", "["):
        if not (yield from _json_calls(cur, out)):
            return False
        return (yield from cur.closing(CALL_END))
    return (yield from xml_call(SHAPE, ctx.tools_by_name, cur, out))


class K2Horizon(ToolCallDetector):
    # written in the template's default spelling (``xml``), one call per line inside the group
    format = calls_format(CALL, _read_call, section=(CALLS, CALLS_END), bare_calls=True,
                          markers=(CALL_END, "<ifm|arg_key>", "</ifm|arg_key>", "<ifm|arg_type>", "</ifm|arg_type>",
                                   "<ifm|arg_value>", "</ifm|arg_value>"),
                          wire=xml_wire(CALL, SHAPE, (CALLS, CALLS_END)))
