"""StepFun Step-3 tool calls: ``steptml`` invokes between DeepSeek-style special tokens.

    <｜tool_calls_begin｜>
    <｜tool_call_begin｜>function<｜tool_sep｜><steptml:invoke name="get_weather">
    <steptml:parameter name="city">Paris</steptml:parameter>
    <steptml:parameter name="days">3</steptml:parameter>
    </steptml:invoke><｜tool_call_end｜>
    <｜tool_calls_end｜>

The bars are U+FF5C (``｜``) and, unlike DeepSeek's tokens, the names use plain underscores.
The call type before ``<｜tool_sep｜>`` (always ``function``) is ignored and may be absent.
Parameter values are typed by the tool's JSON schema; one newline next to a value's tags
belongs to the markup. Text between calls inside the section is markup; a call outside the
section is accepted too.
"""

from __future__ import annotations

from collections.abc import Generator

from parsers.declare import (
    CallContext,
    Cursor,
    MarkerSet,
    Out,
    ToolCallDetector,
    WireFormat,
    XmlArgs,
    XmlCallShape,
    calls_format,
    lit,
    xml_call,
    xml_call_template,
    xml_params,
)

CALLS_BEGIN, CALLS_END = "<｜tool_calls_begin｜>", "<｜tool_calls_end｜>"
CALL_BEGIN, CALL_END, SEP = "<｜tool_call_begin｜>", "<｜tool_call_end｜>", "<｜tool_sep｜>"
INVOKE = '<steptml:invoke name="'
SHAPE = XmlCallShape(name_end=('">',), call_end="</steptml:invoke>",
                     args=XmlArgs('<steptml:parameter name="', '">', "</steptml:parameter>", trim_newline=True,
                                  value_breaks=('\n<steptml:parameter name="', "</steptml:invoke>")))
_SEP = MarkerSet((SEP,))


def _read_call(ctx: CallContext, cur: Cursor, out: Out, marker: str) -> Generator[None, None, bool]:
    """``[TYPE<｜tool_sep｜>]<steptml:invoke name="NAME">…</steptml:invoke><｜tool_call_end｜>``."""
    yield from cur.skip_ws()
    if not (yield from cur.expect(INVOKE)):
        _, term = yield from cur.read_until(_SEP, limit=64)  # the call type, "function"
        if term is None:
            return False
        yield from cur.skip_ws()
        if not (yield from cur.expect(INVOKE)):
            return False
    if not (yield from xml_call(SHAPE, ctx.tools_by_name, cur, out)):
        return False
    return (yield from cur.closing(CALL_END))


class Step3(ToolCallDetector):
    format = calls_format(
        CALL_BEGIN, _read_call, section=(CALLS_BEGIN, CALLS_END), bare_calls=True,
        markers=(CALL_END, SEP, "<steptml:invoke", "</steptml:invoke>", "<steptml:parameter", "</steptml:parameter>"),
        wire=WireFormat(lit(CALL_BEGIN + "function" + SEP) + xml_call_template(INVOKE, SHAPE) + lit(CALL_END),
                        section=(lit(CALLS_BEGIN + "\n"), lit("\n" + CALLS_END)), separator="\n",
                        args=xml_params(SHAPE.args)))
