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

from parsers.core.jsoncall import JsonCallShape
from parsers.core.listcalls import Opener, list_calls, starts_with_list
from parsers.core.programs import tagged_json_calls
from parsers.function_call import ToolCallDetector
from parsers.wire import WireFormat

TOOL_CALL_TOKEN = "<|tool_call|>"
TOOL_CALL, TOOL_CALL_END = "<tool_call>", "</tool_call>"


class Granite(ToolCallDetector):
    start_markers = (TOOL_CALL_TOKEN, TOOL_CALL)
    markers = (TOOL_CALL_TOKEN, TOOL_CALL, TOOL_CALL_END)
    wire = WireFormat('{"name": "$name", "arguments": $args}', section=(TOOL_CALL_TOKEN + "[", "]"), separator=", ")
    body = list_calls({TOOL_CALL_TOKEN: Opener(lone_object=True),
                       TOOL_CALL: Opener(closer=TOOL_CALL_END, lone_object=True)},
                      JsonCallShape(), bare_at_start=True)

    def has_tool_call(self, text: str) -> bool:
        return super().has_tool_call(text) or starts_with_list(text)


class Granite4(ToolCallDetector):
    start_markers = (TOOL_CALL,)
    markers = (TOOL_CALL, TOOL_CALL_END)
    wire = WireFormat('<tool_call>\n{"name": "$name", "arguments": $args}\n</tool_call>', separator="\n")
    body = tagged_json_calls(TOOL_CALL, TOOL_CALL_END, JsonCallShape())
