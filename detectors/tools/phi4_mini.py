"""Microsoft Phi-4-mini tool calls: ``functools[`` opens a JSON list of calls.

    Let me check.functools[{"name": "get_weather", "arguments": {"city": "Paris"}}, {"name": "f", "arguments": {}}]

There is no closing marker; text before the list is content (vLLM drops it, we keep it), and so
is text after it. Each call names its arguments ``arguments`` (or ``parameters``).
"""

from __future__ import annotations

from parsers.core.jsoncall import JsonCallShape
from parsers.core.listcalls import Opener, list_calls
from parsers.function_call import ToolCallDetector
from parsers.wire import WireFormat

FUNCTOOLS = "functools["


class Phi4MiniJson(ToolCallDetector):
    start_markers = (FUNCTOOLS,)
    markers = (FUNCTOOLS,)
    wire = WireFormat('{"name": "$name", "arguments": $args}', section=(FUNCTOOLS, "]"), separator=", ")
    body = list_calls({FUNCTOOLS: Opener(opens_list=True)}, JsonCallShape())
