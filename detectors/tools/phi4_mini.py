"""Microsoft Phi-4-mini tool calls: ``functools[`` opens a JSON list of calls.

    Let me check.functools[{"name": "get_weather", "arguments": {"city": "Paris"}}, {"name": "f", "arguments": {}}]

There is no closing marker; text before the list is content (vLLM drops it, we keep it), and so
is text after it. Each call names its arguments ``arguments`` (or ``parameters``).
"""

from __future__ import annotations

from parsers.declare import Opener, ToolCallDetector, json_list

FUNCTOOLS = "functools["


class Phi4MiniJson(ToolCallDetector):
    format = json_list({FUNCTOOLS: Opener(opens_list=True)}, write=FUNCTOOLS)
