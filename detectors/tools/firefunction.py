"""Fireworks FireFunction v2 tool calls: `` functools[`` opens a JSON list of calls.

    I will look. functools[{"name": "get_weather", "arguments": {"city": "Paris"}}, {"name": "f", "arguments": {}}]

The chat template renders a turn as its text, then `` functools[`` + the calls + ``]``; the space
before ``functools`` belongs to the marker (it is trimmed from the content). Under a grammar
(``tool_choice: required``) the marker may be left out, so a bare list at the very start of the
output is a call list too. There is no closing marker.
"""

from __future__ import annotations

from detectors.turns import LLAMA3
from parsers.declare import Opener, ToolCallDetector, json_list

FUNCTOOLS = "functools["


class FireFunction(ToolCallDetector):
    end_tokens = LLAMA3
    format = json_list({FUNCTOOLS: Opener(opens_list=True)}, write=FUNCTOOLS, lead=" ", bare_at_start=True)
