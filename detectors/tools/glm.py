"""GLM-4.5 / 4.6 / 4.7 / 5 tool calls: the name, then key/value tag pairs.

    <tool_call>get_weather
    <arg_key>city</arg_key>
    <arg_value>Paris</arg_value>
    </tool_call>

GLM-4.7 writes the same without newlines (``<tool_call>get_weather<arg_key>city</arg_key>…``).
Values are typed by the tool's JSON schema (objects/arrays/numbers as JSON, strings as written);
a last value whose ``</arg_value>`` is missing ends at a ``</tool_call>`` that closes the output
or precedes the next call (elsewhere that text is part of the value).
"""

from __future__ import annotations

from detectors.turns import GLM
from parsers.declare import ToolCallDetector, XmlArgs, XmlCallShape, tagged_xml

SHAPE = XmlCallShape(
    name_end=("\n", "<arg_key>", "</tool_call>"),
    call_end="</tool_call>",
    args=XmlArgs("<arg_key>", "</arg_key>", "</arg_value>", value_start="<arg_value>",
                 value_breaks=("</tool_call>",), value_break_follow=("\n", "<tool_call>")),
)


class Glm45(ToolCallDetector):
    end_tokens = GLM
    format = tagged_xml("<tool_call>", SHAPE)


class Glm47(Glm45):
    """GLM-4.7: the compact spelling of the same format (read alike; written without newlines, as
    GLM-4.7's own template writes calls)."""

    format = tagged_xml("<tool_call>", SHAPE, newlines=False)
