"""IBM Granite tool calls, by generation.

Granite 3.x: a JSON list of calls after ``<|tool_call|>`` (3.0, 3.2, 3.3; a special token), or
after the plain string ``<tool_call>`` (3.1), or bare at the start of the output; text may come
before the marker:

    Let me check.<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris"}}, {"name": "f", "arguments": {}}]

A lone call object after the marker is accepted too; ``</tool_call>`` after a ``<tool_call>``
list is markup. Thinking (``<think>…</think><response>…</response>``) belongs to the ``granite``
reasoning parser.

Granite 4.0 / 4.1: one ``<tool_call>`` block per call, as in Qwen 2.5 / Hermes:

    <tool_call>
    {"name": "get_weather", "arguments": {"city": "Paris"}}
    </tool_call>
"""

from __future__ import annotations

from detectors.turns import GRANITE
from parsers.declare import Opener, ToolCallDetector, json_list, tagged_json

TOOL_CALL_TOKEN = "<|tool_call|>"
TOOL_CALL, TOOL_CALL_END = "<tool_call>", "</tool_call>"


class Granite(ToolCallDetector):
    end_tokens = GRANITE
    format = json_list({TOOL_CALL_TOKEN: Opener(lone_object=True),
                        TOOL_CALL: Opener(closer=TOOL_CALL_END, lone_object=True)},
                       write=TOOL_CALL_TOKEN, bare_at_start=True)


class Granite4(ToolCallDetector):
    end_tokens = GRANITE
    format = tagged_json(TOOL_CALL, TOOL_CALL_END)
