"""MiniMax-M2 tool calls: ``invoke`` elements inside a ``<minimax:tool_call>`` section.

    <minimax:tool_call>
    <invoke name="get_weather">
    <parameter name="city">Paris</parameter>
    </invoke>
    </minimax:tool_call>
"""

from __future__ import annotations

from parsers.core.programs import xml_calls
from parsers.core.xmlcall import XmlArgs, XmlCallShape
from parsers.function_call import ToolCallDetector
from parsers.wire import WireFormat

SECTION = ("<minimax:tool_call>", "</minimax:tool_call>")
SHAPE = XmlCallShape(name_end=('">',), call_end="</invoke>",
                     args=XmlArgs('<parameter name="', '">', "</parameter>",
                                  value_breaks=("\n<parameter name=", "</invoke>")))


class MinimaxM2(ToolCallDetector):
    start_markers = (SECTION[0],)
    markers = (*SECTION, '<invoke name="', "</invoke>", '<parameter name="', "</parameter>")
    wire = WireFormat('<invoke name="$name">\n$args</invoke>\n', section=(SECTION[0] + "\n", SECTION[1]),
                      params='<parameter name="$key">$value</parameter>\n', string_value_end="</parameter>")
    body = xml_calls('<invoke name="', SHAPE, section=SECTION)
