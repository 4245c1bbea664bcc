"""Salesforce xLAM tool calls: one JSON list of call objects.

The model answers with the list itself at the start of its output; the parser also takes it
inside a code fence, after ``[TOOL_CALLS]`` or inside ``<tool_call>…</tool_call>`` (text may come
before those), and right after ``</think>`` when no reasoning parser removed the thinking:

    [{"name": "get_weather", "arguments": {"city": "Dallas"}}, {"name": "get_time", "arguments": {}}]
    I'll help you with that.
    ```json
    [{"name": "get_weather", "arguments": {"city": "Dallas"}}]
    ```

The fence and wrappers are markup; a fence holding anything but a call list stays content.
"""

from __future__ import annotations

from parsers.core.jsoncall import JsonCallShape
from parsers.core.listcalls import Opener, list_calls, starts_with_list
from parsers.function_call import ToolCallDetector

TOOL_CALLS = "[TOOL_CALLS]"
TOOL_CALL, TOOL_CALL_END = "<tool_call>", "</tool_call>"
FENCE, JSON_FENCE = "```", "```json"


class Xlam(ToolCallDetector):
    start_markers = (TOOL_CALLS, TOOL_CALL)
    markers = (TOOL_CALLS, TOOL_CALL, TOOL_CALL_END)
    body = list_calls({TOOL_CALLS: Opener(lone_object=True),
                       TOOL_CALL: Opener(closer=TOOL_CALL_END, lone_object=True),
                       JSON_FENCE: Opener(closer=FENCE, literal=True),
                       FENCE: Opener(closer=FENCE, literal=True)},
                      JsonCallShape(), bare_at_start=True, bare_after=("</think>",))

    def has_tool_call(self, text: str) -> bool:
        return super().has_tool_call(text) or FENCE in text or starts_with_list(text) or "</think>[" in text
