"""Microsoft Phi-4-mini tool calls: ``functools[`` opens a JSON list of calls.

    Let me check.functools[{"name": "get_weather", "arguments": {"city": "Paris"}}, {"name": "f", "arguments": {}}]

There is no closing marker; text before the list is content (vLLM drops it, we keep it), and so
is text after it. Each call names its arguments ``arguments`` (or ``parameters``).
"""

from __future__ import annotations

from detectors.turns import PHI
from parsers.declare import Opener, ToolCallDetector, json_list

FUNCTOOLS = "functools["


class Phi4MiniJson(ToolCallDetector):
    end_tokens = PHI
    format = json_list({FUNCTOOLS: Opener(opens_list=True)}, write=FUNCTOOLS)
