"""Qwen3-Coder / Qwen3.5 XML tool calls (also Nemotron-3-Nano, Step-3.5):

    <tool_call>
    <function=get_weather>
    <parameter=city>
    Paris
    </parameter>
    </function>
    </tool_call>

One newline after an opening tag and one before a closing tag belong to the markup. Parameter
values are typed by the tool's JSON schema. A closing ``</parameter>`` counts only at a line end
or before the next tag (mid-line it is text of the value), and a value whose closing tag is
missing ends at the next ``<parameter=`` or ``</function>`` line. A bare ``<function=…>`` without
the ``<tool_call>`` wrapper is accepted (its stray ``</tool_call>`` is markup).
"""

from __future__ import annotations

from detectors.turns import CHATML
from parsers.declare import ToolCallDetector, XmlArgs, XmlCallShape, wrapped_xml

TOOL_CALL, TOOL_CALL_END, FUNCTION = "<tool_call>", "</tool_call>", "<function="
SHAPE = XmlCallShape(name_end=(">",), call_end="</function>", args=XmlArgs(
    "<parameter=", ">", "</parameter>", trim_newline=True, value_end_follow=("\n", "<"),
    value_breaks=("\n<parameter=", "\n</function>")))


class Qwen3Coder(ToolCallDetector):
    end_tokens = CHATML
    format = wrapped_xml((TOOL_CALL, TOOL_CALL_END), FUNCTION, SHAPE)
