"""Qwen 2.5 / Qwen 3 / Hermes: one ``<tool_call>`` block per call holding a JSON object.

    <tool_call>
    {"name": "get_weather", "arguments": {"city": "Paris"}}
    </tool_call>
"""

from __future__ import annotations

from detectors.turns import CHATML
from parsers.declare import ToolCallDetector, tagged_json


class Qwen25(ToolCallDetector):
    end_tokens = CHATML
    format = tagged_json(start="<tool_call>", end="</tool_call>", separator="\n")


class Hermes(Qwen25):
    """NousResearch Hermes 2 Pro / 3: the same wire format as Qwen 2.5."""
