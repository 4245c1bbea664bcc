"""Llama 3.1 / 3.2 / 3.3 / 4 JSON tool calls.

The model answers with a bare JSON object at the start of its output, or after ``<|python_tag|>``;
several calls are separated by ``;``:

    {"name": "get_weather", "parameters": {"city": "Paris"}}
    <|python_tag|>{"type": "function", "name": "f", "parameters": {...}}; {"name": "g", ...}

A leading JSON object whose first key cannot belong to a call (``{"answer": …}``) stays content.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from parsers.core.cursor import Cursor
from parsers.core.jsoncall import JsonCallShape, json_call
from parsers.core.markers import MarkerSet
from parsers.core.program import Out
from parsers.function_call import ToolCallDetector
from parsers.wire import WireFormat

PYTHON_TAG = "<|python_tag|>"
SHAPE = JsonCallShape(name_keys=("name",), args_keys=("parameters", "arguments"))
_TAG = MarkerSet((PYTHON_TAG,))


def _call_sequence(cur: Cursor, out: Out, marker: str, checked: bool) -> Generator[None, None, None]:
    """``call ; call ; …`` — each call begun and ended here."""
    out.calls.begin(marker)
    while True:
        ok = yield from json_call(cur, out, SHAPE, _TAG, first_key_checked=checked)
        out.calls.end(ok)
        if not ok:
            return
        checked = True
        yield from cur.skip_ws()
        sep = yield from cur.match((";",))
        if sep is None:
            return
        out.calls.begin(sep)


class Llama3(ToolCallDetector):
    start_markers = (PYTHON_TAG,)
    markers = (PYTHON_TAG,)
    wire = WireFormat('{"name": "$name", "parameters": $args}', separator="; ")
    trim_around_calls = False

    def has_tool_call(self, text: str) -> bool:
        return PYTHON_TAG in text or text.lstrip().startswith("{")

    def body(self, cur: Cursor, out: Out) -> Generator[None, None, Any]:
        lead: list[str] = []
        yield from cur.skip_ws(lead.append)
        if (yield from cur.peek()) == "{":
            yield from _call_sequence(cur, out, "".join(lead), checked=False)
        else:
            out.content.write("".join(lead))
        while True:
            marker = yield from cur.until(_TAG, out.content.write)
            if marker is None:
                return
            yield from _call_sequence(cur, out, marker, checked=True)
