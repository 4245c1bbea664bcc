"""GigaChat 3 / 3.1 tool calls: a ``function call`` turn (3.0) or a ``<|function_call|>`` token (3.1)
followed by one JSON object; GigaChat 3.5's GCML invokes are accepted too.

    Let me check.<|message_sep|>

    function call<|role_sep|>
    {"name": "get_weather", "arguments": {"city": "Moscow"}}                       (GigaChat3-10B-A1.8B)

    Let me check.<|function_call|>{"name": "get_weather", "arguments": {"city": "Moscow"}}   (GigaChat3.1)

    <｜GCML｜tool_calls><｜GCML｜invoke name="get_weather">
    <｜GCML｜parameter name="city" string="true">Moscow</｜GCML｜parameter>
    </｜GCML｜invoke></｜GCML｜tool_calls>                                              (GigaChat 3.5)

The templates render one call per assistant message. ``<|message_sep|>`` ends the assistant's
text and is markup (so are a ``<|message_sep|>`` or ``</s>`` right after a call). The call object
is ``{"name": …, "arguments": {…}}``; its arguments stream through as written. GCML parameters
marked ``string="false"`` are JSON (typed by the schema when it says more).

``gigachat35`` reads the same and writes calls as GigaChat 3.5 does (one GCML block, one invoke
and one parameter per line), so forced calls keep that model's own spelling.
"""

from __future__ import annotations

from collections.abc import Generator

from parsers.declare import (
    CallContext,
    Cursor,
    JsonCallShape,
    MarkerSet,
    Opener,
    Out,
    ToolCallDetector,
    ToolFormat,
    WireFormat,
    XmlArgs,
    XmlCallShape,
    call_template,
    json_block,
    lit,
    section_calls,
    xml_call,
    xml_wire,
)

FUNCTION_CALL = "<|function_call|>"  # 3.1
ROLE_CALL = "function call<|role_sep|>"  # 3.0: the "function call" role header
MESSAGE_SEP, ROLE_SEP, EOS = "<|message_sep|>", "<|role_sep|>", "</s>"
GCML = "｜GCML｜"
GCML_OPEN, GCML_CLOSE, GCML_INVOKE = f"<{GCML}tool_calls>", f"</{GCML}tool_calls>", f'<{GCML}invoke name="'
GCML_SHAPE = XmlCallShape(
    name_end=('">',), call_end=f"</{GCML}invoke>", self_closing='"/>',
    args=XmlArgs(f'<{GCML}parameter name="', '"', f"</{GCML}parameter>", attributes=True, string_attribute="string",
                 value_breaks=(f"</{GCML}invoke>",)))
SHAPE = JsonCallShape(name_keys=("name",), args_keys=("arguments", "parameters"))
_OUTER = MarkerSet((FUNCTION_CALL, ROLE_CALL, MESSAGE_SEP, GCML_OPEN))
_STOP = MarkerSet((FUNCTION_CALL, ROLE_SEP, MESSAGE_SEP))
_GCML_INSIDE = MarkerSet((GCML_INVOKE, GCML_CLOSE))
_CALL = Opener(closer=(MESSAGE_SEP, EOS), lone_object=True, lists=False)


def _read(ctx: CallContext, cur: Cursor, out: Out) -> Generator[None, None, None]:
    while True:
        marker = yield from cur.until(_OUTER, out.content.write)
        if marker is None:
            return
        if marker == MESSAGE_SEP:
            out.content.boundary()  # the end of the assistant's text
        elif marker == GCML_OPEN:
            yield from _gcml_section(ctx, cur, out)
        else:  # one call object; a <|message_sep|> or </s> right after it is markup
            yield from json_block(cur, out, marker, _CALL, SHAPE, _STOP)


def _gcml_section(ctx: CallContext, cur: Cursor, out: Out) -> Generator[None, None, None]:
    """GCML invokes up to the section end; after a malformed call the rest is content again."""

    def invoke(_: str) -> Generator[None, None, bool]:
        return (yield from xml_call(GCML_SHAPE, ctx.tools_by_name, cur, out))

    yield from section_calls(cur, out, _GCML_INSIDE, GCML_CLOSE, invoke)


class GigaChat3(ToolCallDetector):
    # written as GigaChat 3.1 does: ``<|function_call|>`` + the call object, per call
    format = ToolFormat(
        read=_read, start_markers=(FUNCTION_CALL, ROLE_CALL, GCML_OPEN),
        markers=(FUNCTION_CALL, MESSAGE_SEP, ROLE_SEP, GCML_OPEN, GCML_CLOSE, f"<{GCML}invoke", f"</{GCML}invoke>",
                 f"<{GCML}parameter", f"</{GCML}parameter>"),
        wire=WireFormat(lit(FUNCTION_CALL) + call_template(SHAPE)))


class GigaChat35(GigaChat3):
    # written as GigaChat 3.5 does: a GCML block, one invoke per call
    format = ToolFormat(read=GigaChat3.format.read, start_markers=(GCML_OPEN, *GigaChat3.format.start_markers),
                        markers=GigaChat3.format.markers, wire=xml_wire(GCML_INVOKE, GCML_SHAPE, (GCML_OPEN, GCML_CLOSE)))
