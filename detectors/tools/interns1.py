"""InternLM2 / InternLM2.5 / Intern-S1 tool calls: one JSON object per action block.

    I'll check.<|action_start|><|plugin|>
    {"name": "get_weather", "parameters": {"city": "Paris"}}<|action_end|>

The arguments sit under ``parameters`` (``arguments`` is accepted too). Whitespace may separate
``<|action_start|>`` and ``<|plugin|>`` (decoders that put spaces between special tokens write
``<|action_start|> <|plugin|>``). Several blocks in a row are several calls. An action block for
another plugin (``<|action_start|><|interpreter|>`` code) is not a tool call and stays content.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from parsers.core.cursor import Cursor
from parsers.core.jsoncall import JsonCallShape, json_call
from parsers.core.markers import MarkerSet
from parsers.core.program import Out
from parsers.core.sections import marker_calls
from parsers.function_call import ToolCallDetector

ACTION_START, PLUGIN, ACTION_END = "<|action_start|>", "<|plugin|>", "<|action_end|>"
SHAPE = JsonCallShape(name_keys=("name",), args_keys=("parameters", "arguments"))
_STOP = MarkerSet((ACTION_START, ACTION_END))


def _parse(detector: Any, cur: Cursor, out: Out, marker: str) -> Generator[None, None, bool]:
    """``<|plugin|>`` (after optional whitespace), the call object, ``<|action_end|>``."""
    yield from cur.skip_ws()
    if not (yield from cur.expect(PLUGIN)):
        return False
    if not (yield from json_call(cur, out, SHAPE, _STOP)):
        return False
    return (yield from cur.closing(ACTION_END))


class InternS1(ToolCallDetector):
    start_markers = (ACTION_START,)
    markers = (ACTION_START, PLUGIN, ACTION_END)
    body = marker_calls(ACTION_START, _parse)
