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

from detectors.turns import CHATML, LLAMA3
from parsers.declare import Opener, ToolCallDetector, json_list

TOOL_CALLS = "[TOOL_CALLS]"
TOOL_CALL, TOOL_CALL_END = "<tool_call>", "</tool_call>"
FENCE, JSON_FENCE = "```", "```json"


class Xlam(ToolCallDetector):
    end_tokens = (*LLAMA3, *CHATML)
    format = json_list({TOOL_CALLS: Opener(lone_object=True),
                        TOOL_CALL: Opener(closer=TOOL_CALL_END, lone_object=True),
                        JSON_FENCE: Opener(closer=FENCE, literal=True),
                        FENCE: Opener(closer=FENCE, literal=True)},
                       write=None, bare_at_start=True, bare_after=("</think>",))
