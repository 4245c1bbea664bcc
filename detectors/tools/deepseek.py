"""DeepSeek tool calls, by generation.

    V3 / R1:  <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\\n```json\\n{…}\\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>
    V3.1:     <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{…}<｜tool▁call▁end｜><｜tool▁calls▁end｜>
    V3.2:     <｜DSML｜function_calls><｜DSML｜invoke name="NAME"><｜DSML｜parameter name="K" string="true">V</｜DSML｜parameter>…</｜DSML｜invoke></｜DSML｜function_calls>
    V4:       the same DSML inside <｜DSML｜tool_calls>; V4.1 spells the tags with a space (<｜DSML｜ calls>, <｜DSML｜ invoke …>)

DSML values marked ``string="false"`` are JSON (typed by the schema when it says more). A
zero-argument invoke may be self-closing (``<｜DSML｜invoke name="x"/>``).
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from parsers.core.cursor import Cursor
from parsers.core.namedcall import NamedJsonShape
from parsers.core.program import Out
from parsers.core.programs import named_json_calls, xml_calls
from parsers.core.sections import marker_calls
from parsers.core.xmlcall import XmlArgs, XmlCallShape, xml_call
from parsers.function_call import ToolCallDetector
from parsers.wire import WireFormat

CALLS_BEGIN, CALLS_END = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
CALL_BEGIN, CALL_END, SEP = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"
SPECIAL = (CALLS_BEGIN, CALLS_END, CALL_BEGIN, CALL_END, SEP)


class DeepSeekV3(ToolCallDetector):
    start_markers = (CALLS_BEGIN, CALL_BEGIN)
    markers = SPECIAL
    wire = WireFormat(f"{CALL_BEGIN}function{SEP}$$name\n```json\n$$args\n```{CALL_END}".replace("$$", "$"),
                      section=(CALLS_BEGIN, CALLS_END), separator="\n")
    body = named_json_calls(CALL_BEGIN, NamedJsonShape(name_end="\n", call_end=CALL_END, type_sep=SEP, fence=True),
                            section=(CALLS_BEGIN, CALLS_END), bare_calls=True)


class DeepSeekV31(ToolCallDetector):
    start_markers = (CALLS_BEGIN, CALL_BEGIN)
    markers = SPECIAL
    wire = WireFormat(f"{CALL_BEGIN}$$name{SEP}$$args{CALL_END}".replace("$$", "$"), section=(CALLS_BEGIN, CALLS_END))
    body = named_json_calls(CALL_BEGIN, NamedJsonShape(name_end=SEP, call_end=CALL_END),
                            section=(CALLS_BEGIN, CALLS_END), bare_calls=True)


def _dsml(prefix: str) -> XmlCallShape:
    return XmlCallShape(
        name_end=('">',), call_end=f"</{prefix}invoke>", self_closing='"/>',
        args=XmlArgs(f'<{prefix}parameter name="', '"', f"</{prefix}parameter>", attributes=True,
                     string_attribute="string", value_breaks=(f"</{prefix}invoke>",)))


DSML, DSML_SPACED = "｜DSML｜", "｜DSML｜ "


class DeepSeekV32(ToolCallDetector):
    wire = WireFormat(f'<{DSML}invoke name="$$name">\n$$args</{DSML}invoke>\n'.replace("$$", "$"),
                      section=(f"<{DSML}function_calls>\n", f"</{DSML}function_calls>"),
                      params=f'<{DSML}parameter name="$$key" string="$$is_string">$$value</{DSML}parameter>\n'
                      .replace("$$", "$"), string_value_end=f"</{DSML}parameter>")
    start_markers = (f"<{DSML}function_calls>",)
    markers = (f"<{DSML}function_calls>", f"</{DSML}function_calls>", f"<{DSML}invoke", f"</{DSML}invoke>",
               f"<{DSML}parameter", f"</{DSML}parameter>", "｜DSML｜")
    body = xml_calls(f'<{DSML}invoke name="', _dsml(DSML), section=(f"<{DSML}function_calls>", f"</{DSML}function_calls>"))


_INVOKES = {f'<{p}invoke name="': _dsml(p) for p in (DSML, DSML_SPACED)}


def _parse_dsml(detector: Any, cur: Cursor, out: Out, marker: str) -> Generator[None, None, bool]:
    return (yield from xml_call(_INVOKES[marker], detector.tools_by_name, cur, out))


class DeepSeekV4(ToolCallDetector):
    start_markers = (f"<{DSML}tool_calls>", f"<{DSML_SPACED}calls>")
    markers = (f"<{DSML}tool_calls>", f"</{DSML}tool_calls>", f"<{DSML_SPACED}calls>", f"</{DSML_SPACED}calls>",
               "｜DSML｜")
    body = marker_calls(tuple(_INVOKES), _parse_dsml, section=(
        (f"<{DSML}tool_calls>", f"</{DSML}tool_calls>"), (f"<{DSML_SPACED}calls>", f"</{DSML_SPACED}calls>")))
