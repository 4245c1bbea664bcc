"""MiniMax-M3 tool calls: nested XML elements, every tag behind the ``]<]minimax[>[`` token.

    ]<]minimax[>[<tool_call>
    ]<]minimax[>[<invoke name="get_weather">]<]minimax[>[<city>Paris]<]minimax[>[</city>]<]minimax[>[</invoke>
    ]<]minimax[>[</tool_call>

Object and array arguments are nested elements (``<number><real>1.5</real>…</number>``, repeated
``<item>``s), converted to JSON typed by the tool's schema (``parsers.shapes.nestedxml``).
"""

from __future__ import annotations

from detectors.turns import MINIMAX
from parsers.declare import NestedXmlShape, ToolCallDetector, nested_xml

SHAPE = NestedXmlShape(prefix="]<]minimax[>[")


class MinimaxM3(ToolCallDetector):
    end_tokens = MINIMAX
    format = nested_xml(SHAPE)
