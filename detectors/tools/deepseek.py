"""DeepSeek tool calls, by generation.

    V3 / R1:  <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\\n```json\\n{…}\\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>
    V3.1:     <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{…}<｜tool▁call▁end｜><｜tool▁calls▁end｜>
    V3.2:     <｜DSML｜function_calls><｜DSML｜invoke name="NAME"><｜DSML｜parameter name="K" string="true">V</｜DSML｜parameter>…</｜DSML｜invoke></｜DSML｜function_calls>
    V4:       the same DSML inside <｜DSML｜tool_calls>; V4.1 spells the tags with a space (<｜DSML｜ calls>, <｜DSML｜ invoke …>)

DSML values marked ``string="false"`` are JSON (typed by the schema when it says more). A
zero-argument invoke may be self-closing (``<｜DSML｜invoke name="x"/>``). Invokes whose opening
``function_calls`` / ``tool_calls`` wrapper is missing (models drop it at long context) are calls
too; the wrapper's stray closing tag after them is markup. A wrapper in another generation's
spelling (V4 writing V3.2's ``function_calls``, or the reverse) is the wrapper all the same.
"""

from __future__ import annotations

from collections.abc import Generator

from detectors.turns import DEEPSEEK
from parsers.declare import (
    CallContext,
    Cursor,
    NamedJsonShape,
    Out,
    ToolCallDetector,
    XmlArgs,
    XmlCallShape,
    calls_format,
    named_json,
    tagged_xml,
    xml_call,
    xml_wire,
)

CALLS_BEGIN, CALLS_END = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
CALL_BEGIN, CALL_END, SEP = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"


class DeepSeekV3(ToolCallDetector):
    end_tokens = DEEPSEEK
    format = named_json(CALL_BEGIN, NamedJsonShape(name_end="\n", call_end=CALL_END, type_sep=SEP, fence=True),
                        section=(CALLS_BEGIN, CALLS_END), bare_calls=True, separator="\n")


class DeepSeekV31(ToolCallDetector):
    end_tokens = DEEPSEEK
    format = named_json(CALL_BEGIN, NamedJsonShape(name_end=SEP, call_end=CALL_END),
                        section=(CALLS_BEGIN, CALLS_END), bare_calls=True)


def _dsml(prefix: str) -> XmlCallShape:
    return XmlCallShape(
        name_end=('">',), call_end=f"</{prefix}invoke>", self_closing='"/>',
        args=XmlArgs(f'<{prefix}parameter name="', '"', f"</{prefix}parameter>", attributes=True,
                     string_attribute="string", value_breaks=(f"</{prefix}invoke>",)))


DSML, DSML_SPACED = "｜DSML｜", "｜DSML｜ "


#: the DSML wrappers, by generation: V3.2's, V4's, V4.1's; each generation reads them all
_V32_SECTION = (f"<{DSML}function_calls>", f"</{DSML}function_calls>")
_V4_SECTION = (f"<{DSML}tool_calls>", f"</{DSML}tool_calls>")
_V41_SECTION = (f"<{DSML_SPACED}calls>", f"</{DSML_SPACED}calls>")


class DeepSeekV32(ToolCallDetector):
    end_tokens = DEEPSEEK
    format = tagged_xml(f'<{DSML}invoke name="', _dsml(DSML), section=(_V32_SECTION, _V4_SECTION, _V41_SECTION),
                        bare_calls=True, markers=(DSML,))


_INVOKES = {f'<{p}invoke name="': _dsml(p) for p in (DSML, DSML_SPACED)}
_V4_SECTIONS = (_V4_SECTION, _V41_SECTION, _V32_SECTION)


def _read_dsml(ctx: CallContext, cur: Cursor, out: Out, marker: str) -> Generator[None, None, bool]:
    return (yield from xml_call(_INVOKES[marker], ctx.tools_by_name, cur, out))


class DeepSeekV4(ToolCallDetector):
    """Written in V4.0's spelling (``<｜DSML｜tool_calls>``)."""

    end_tokens = DEEPSEEK
    format = calls_format(tuple(_INVOKES), _read_dsml, section=_V4_SECTIONS, bare_calls=True, markers=(DSML,),
                          wire=xml_wire(f'<{DSML}invoke name="', _dsml(DSML), _V4_SECTIONS[0]))


class DeepSeekV41(ToolCallDetector):
    """Read as V4; written in V4.1's spacing (``<｜DSML｜ calls>``), so forced calls keep its tags."""

    format = calls_format(tuple(_INVOKES), _read_dsml, section=_V4_SECTIONS, bare_calls=True, markers=(DSML,),
                          wire=xml_wire(f'<{DSML_SPACED}invoke name="', _dsml(DSML_SPACED), _V4_SECTIONS[1]))
