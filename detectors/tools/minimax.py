"""MiniMax-M2 tool calls: ``invoke`` elements inside a ``<minimax:tool_call>`` section.

    <minimax:tool_call>
    <invoke name="get_weather">
    <parameter name="city">Paris</parameter>
    </invoke>
    </minimax:tool_call>
"""

from __future__ import annotations

from detectors.turns import MINIMAX
from parsers.declare import ToolCallDetector, XmlArgs, XmlCallShape, tagged_xml

SECTION = ("<minimax:tool_call>", "</minimax:tool_call>")
SHAPE = XmlCallShape(name_end=('">',), call_end="</invoke>",
                     args=XmlArgs('<parameter name="', '">', "</parameter>",
                                  value_breaks=("\n<parameter name=", "</invoke>")))


class MinimaxM2(ToolCallDetector):
    end_tokens = MINIMAX
    format = tagged_xml('<invoke name="', SHAPE, section=SECTION)
