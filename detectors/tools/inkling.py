"""Inkling tool calls, reasoning and content: typed content blocks, parsed from text as one program.

    <|message_model|><|content_thinking|>Need the weather.<|end_message|><|message_model|>get_weather<|content_invoke_tool_json|>{"name": "get_weather", "args": {"city": "Paris"}}<|end_message|>

→ reasoning ``Need the weather.``, one call ``get_weather({"city": "Paris"})``. Text blocks
(``<|content_text|>``) are content; ``<|content_model_end_sampling|>`` ends the output. Details and
the malformed-output policy: ``parsers.shapes.blocks``. The backend must keep Inkling's control
tokens as text (they are special tokens).

The format carries its own reasoning (``handles_reasoning``); the ``inkling`` reasoning parser
runs the same program without calls.
"""

from __future__ import annotations

from parsers.declare import INKLING, ToolCallDetector, typed_blocks


class Inkling(ToolCallDetector):
    format = typed_blocks(INKLING)
