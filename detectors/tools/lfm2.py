"""LFM2 / LFM2.5 (Liquid AI) tool calls: a pythonic call list between special tokens.

    <|tool_call_start|>[get_weather(city="Paris"), get_time()]<|tool_call_end|>
    <|tool_call_start|>[search(query='café', filters={"open": true})]<|tool_call_end|>   (LFM2.5 renders dicts as JSON)
    <|tool_call_start|>[{"name": "get_weather", "arguments": {"city": "Paris"}}]<|tool_call_end|>

Arguments are converted to JSON as they stream (``parsers.shapes.pythonic``); a JSON call list (or a
single JSON call object) inside the tokens streams as written. A single call without brackets is
accepted. An orphan ``<|tool_call_end|>`` (LFM2 sometimes echoes a call after the block) is markup.
"""

from __future__ import annotations

from collections.abc import Generator

from detectors.turns import CHATML
from parsers.declare import (
    DEFAULT_SHAPE,
    CallContext,
    Cursor,
    MarkerSet,
    Out,
    ToolCallDetector,
    ToolFormat,
    json_call,
    json_call_list,
    peek_past_ws,
    python_call_lines,
    python_call_list,
    python_list_wire,
)

START, END = "<|tool_call_start|>", "<|tool_call_end|>"
_OUTER = MarkerSet((START, END))


def _block(cur: Cursor, out: Out) -> Generator[None, None, None]:
    """After ``<|tool_call_start|>`` (the first call begun): the calls, then the end token."""
    first, at = yield from peek_past_ws(cur)
    if first == "[" and (yield from peek_past_ws(cur, at + 1))[0] == "{":
        if (yield from json_call_list(cur, out, DEFAULT_SHAPE, _OUTER)):
            yield from cur.closing(END)
        return
    if first == "{":
        ok = yield from json_call(cur, out, DEFAULT_SHAPE, _OUTER)
        out.calls.end(ok and (yield from cur.closing(END)))
        return
    yield from cur.skip_ws()
    if (yield from cur.expect("[")):
        if (yield from python_call_list(cur, out)):
            yield from cur.closing(END)
        return
    yield from python_call_lines(cur, out, END)


def _read(ctx: CallContext, cur: Cursor, out: Out) -> Generator[None, None, None]:
    while True:
        marker = yield from cur.until(_OUTER, out.content.write)
        if marker is None:
            return
        if marker == END:  # an orphan end token: dropped
            continue
        out.calls.begin(marker)
        yield from _block(cur, out)


class Lfm2(ToolCallDetector):
    end_tokens = CHATML
    format = ToolFormat(read=_read, start_markers=(START,), markers=(START, END),
                        wire=python_list_wire(START + "[", "]" + END))
