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
from typing import Any

from parsers.core.cursor import Cursor
from parsers.core.markers import MarkerSet
from parsers.core.program import Out
from parsers.core.sections import marker_calls
from parsers.core.xmlcall import XmlArgs, XmlCallShape, xml_call
from parsers.function_call import ToolCallDetector

CALLS_BEGIN, CALLS_END = "<｜tool_calls_begin｜>", "<｜tool_calls_end｜>"
CALL_BEGIN, CALL_END, SEP = "<｜tool_call_begin｜>", "<｜tool_call_end｜>", "<｜tool_sep｜>"
INVOKE = '<steptml:invoke name="'
SHAPE = XmlCallShape(name_end=('">',), call_end="</steptml:invoke>",
                     args=XmlArgs('<steptml:parameter name="', '">', "</steptml:parameter>", trim_newline=True,
                                  value_breaks=('\n<steptml:parameter name="', "</steptml:invoke>")))
_SEP = MarkerSet((SEP,))


def _parse(detector: Any, cur: Cursor, out: Out, marker: str) -> Generator[None, None, bool]:
    """``[TYPE<｜tool_sep｜>]<steptml:invoke name="NAME">…</steptml:invoke><｜tool_call_end｜>``."""
    yield from cur.skip_ws()
    if not (yield from cur.expect(INVOKE)):
        _, term = yield from cur.read_until(_SEP, limit=64)  # the call type, "function"
        if term is None:
            return False
        yield from cur.skip_ws()
        if not (yield from cur.expect(INVOKE)):
            return False
    if not (yield from xml_call(SHAPE, detector.tools_by_name, cur, out)):
        return False
    return (yield from cur.closing(CALL_END))


class Step3(ToolCallDetector):
    start_markers = (CALLS_BEGIN, CALL_BEGIN)
    markers = (CALLS_BEGIN, CALLS_END, CALL_BEGIN, CALL_END, SEP, "<steptml:invoke", "</steptml:invoke>",
               "<steptml:parameter", "</steptml:parameter>")
    body = marker_calls(CALL_BEGIN, _parse, section=(CALLS_BEGIN, CALLS_END), bare_calls=True)
