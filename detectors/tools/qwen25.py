"""Qwen 2.5 / Qwen 3 / Hermes: one ``<tool_call>`` block per call holding a JSON object.

    <tool_call>
    {"name": "get_weather", "arguments": {"city": "Paris"}}
    </tool_call>
"""

from __future__ import annotations

from parsers.core.jsoncall import JsonCallShape
from parsers.core.programs import tagged_json_calls
from parsers.function_call import ToolCallDetector
from parsers.wire import WireFormat


class Qwen25(ToolCallDetector):
    start_markers = ("<tool_call>",)
    markers = ("<tool_call>", "</tool_call>")
    wire = WireFormat('<tool_call>\n{"name": "$name", "arguments": $args}\n</tool_call>', separator="\n")
    body = tagged_json_calls("<tool_call>", "</tool_call>", JsonCallShape())


class Hermes(Qwen25):
    """NousResearch Hermes 2 Pro / 3: the same wire format as Qwen 2.5."""
