"""Fireworks FireFunction v2 tool calls: `` functools[`` opens a JSON list of calls.

    I will look. functools[{"name": "get_weather", "arguments": {"city": "Paris"}}, {"name": "f", "arguments": {}}]

The chat template renders a turn as its text, then `` functools[`` + the calls + ``]``; the space
before ``functools`` belongs to the marker (it is trimmed from the content). Under a grammar
(``tool_choice: required``) the marker may be left out, so a bare list at the very start of the
output is a call list too. There is no closing marker.
"""

from __future__ import annotations

from parsers.core.jsoncall import JsonCallShape
from parsers.core.listcalls import Opener, list_calls, starts_with_list
from parsers.function_call import ToolCallDetector
from parsers.wire import WireFormat

FUNCTOOLS = "functools["


class FireFunction(ToolCallDetector):
    start_markers = (FUNCTOOLS,)
    markers = (FUNCTOOLS,)
    wire = WireFormat('{"name": "$name", "arguments": $args}', section=(" " + FUNCTOOLS, "]"), separator=", ")
    body = list_calls({FUNCTOOLS: Opener(opens_list=True)}, JsonCallShape(), bare_at_start=True)

    def has_tool_call(self, text: str) -> bool:
        return FUNCTOOLS in text or starts_with_list(text)
