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

from detectors.turns import CHATML
from parsers.declare import (
    CallContext,
    Cursor,
    JsonCallShape,
    MarkerSet,
    Out,
    ToolCallDetector,
    WireFormat,
    call_template,
    calls_format,
    json_call,
    lit,
)

ACTION_START, PLUGIN, ACTION_END = "<|action_start|>", "<|plugin|>", "<|action_end|>"
SHAPE = JsonCallShape(name_keys=("name",), args_keys=("parameters", "arguments"))
_STOP = MarkerSet((ACTION_START, ACTION_END))


def _read_call(ctx: CallContext, cur: Cursor, out: Out, marker: str) -> Generator[None, None, bool]:
    """``<|plugin|>`` (after optional whitespace), the call object, ``<|action_end|>``."""
    yield from cur.skip_ws()
    if not (yield from cur.expect(PLUGIN)):
        return False
    if not (yield from json_call(cur, out, SHAPE, _STOP)):
        return False
    return (yield from cur.closing(ACTION_END))


class InternS1(ToolCallDetector):
    end_tokens = CHATML
    format = calls_format(ACTION_START, _read_call, markers=(PLUGIN, ACTION_END), wire=WireFormat(
        lit(ACTION_START + PLUGIN + "\n") + call_template(SHAPE) + lit(ACTION_END), separator="\n"))
