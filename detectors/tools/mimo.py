"""Xiaomi MiMo tool calls, both spellings found inside ``<tool_call>`` blocks.

    <tool_call>
    {"name": "get_weather", "arguments": {"city": "Paris"}}
    </tool_call>                                    (MiMo-7B / MiMo-VL: the Hermes JSON object)

    <tool_call>
    <function=get_weather>
    <parameter=city>Paris</parameter>
    </function>
    </tool_call>                                    (MiMo-V2-Flash: Qwen3-Coder-style XML)

The first non-space character after ``<tool_call>`` decides: ``{`` is a JSON call (arguments
stream through as written), ``<function=`` an XML call (values typed by the tool's JSON schema).
XML values are taken as written, surrounding newlines included, as SGLang's and vLLM's MiMo
parsers do.
"""

from __future__ import annotations

from collections.abc import Generator

from detectors.turns import CHATML
from parsers.declare import (
    DEFAULT_SHAPE,
    CallContext,
    Cursor,
    MarkerSet,
    Out,
    ToolCallDetector,
    WireFormat,
    XmlArgs,
    XmlCallShape,
    call_template,
    calls_format,
    json_call,
    lit,
    xml_call,
)

TOOL_CALL, TOOL_CALL_END, FUNCTION = "<tool_call>", "</tool_call>", "<function="
XML_SHAPE = XmlCallShape(name_end=(">",), call_end="</function>",
                         args=XmlArgs("<parameter=", ">", "</parameter>",
                                      value_breaks=("\n<parameter=", "\n</function>")))
_STOP = MarkerSet((TOOL_CALL, TOOL_CALL_END))


def _read_call(ctx: CallContext, cur: Cursor, out: Out, marker: str) -> Generator[None, None, bool]:
    """The call in one ``<tool_call>`` block, JSON or XML, through ``</tool_call>``."""
    yield from cur.skip_ws()
    if (yield from cur.peek()) == "{":
        ok = yield from json_call(cur, out, DEFAULT_SHAPE, _STOP)
    elif (yield from cur.expect(FUNCTION)):
        ok = yield from xml_call(XML_SHAPE, ctx.tools_by_name, cur, out)
    else:
        ok = False
    return ok and (yield from cur.closing(TOOL_CALL_END))


class Mimo(ToolCallDetector):
    end_tokens = CHATML
    # written in the JSON spelling (MiMo-7B / MiMo-VL), which keeps argument types exact
    format = calls_format(TOOL_CALL, _read_call, markers=(TOOL_CALL_END, FUNCTION, "</function>", "<parameter=",
                                                          "</parameter>"),
                          wire=WireFormat(lit(TOOL_CALL + "\n") + call_template(DEFAULT_SHAPE) + lit("\n" + TOOL_CALL_END),
                                          separator="\n"))
