"""Arcee Trinity tool calls: the Qwen 2.5 ``<tool_call>`` JSON blocks, written inside or after
``<think>`` reasoning.

    <think>The user wants the weather.
    <tool_call>
    {"name": "get_weather", "arguments": {"city": "Paris"}}
    </tool_call></think>

The think tags are markup wherever they reach this parser (without a reasoning parser, or after
one that stopped at a call inside the block): they are dropped, the text between them is kept. The
format declares its calls inside the thought, so a reasoning parser ends the block at a call even
when ``</think>`` follows it (for other formats such a call was only thought about).
"""

from __future__ import annotations

from detectors.turns import CHATML
from parsers.declare import ToolCallDetector, tagged_json


class Trinity(ToolCallDetector):
    format = tagged_json(start="<tool_call>", end="</tool_call>", separator="\n",
                         markup=("<think>", "</think>")).with_calls_in_thought()
    end_tokens = CHATML
