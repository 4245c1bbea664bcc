"""Llama 3.1 / 3.2 / 3.3 / 4 JSON tool calls.

The model answers with a bare JSON object at the start of its output, or after ``<|python_tag|>``;
several calls are separated by ``;``:

    {"name": "get_weather", "parameters": {"city": "Paris"}}
    <|python_tag|>{"type": "function", "name": "f", "parameters": {...}}; {"name": "g", ...}

A leading JSON object whose first key cannot belong to a call (``{"answer": …}``) stays content.
"""

from __future__ import annotations

from collections.abc import Generator

from detectors.turns import LLAMA3, LLAMA4
from parsers.declare import (
    CallContext,
    Cursor,
    JsonCallShape,
    MarkerSet,
    Out,
    ToolCallDetector,
    ToolFormat,
    WireFormat,
    call_template,
    json_call,
)

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


def _read(ctx: CallContext, cur: Cursor, out: Out) -> Generator[None, None, None]:
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


class Llama3(ToolCallDetector):
    end_tokens = (*LLAMA3, *LLAMA4)
    format = ToolFormat(read=_read, start_markers=(PYTHON_TAG,), trim_around_calls=False,
                        wire=WireFormat(call_template(SHAPE), separator="; "),
                        sniff=lambda text: PYTHON_TAG in text or text.lstrip().startswith("{"))
