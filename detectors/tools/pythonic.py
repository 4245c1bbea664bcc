"""Pythonic tool calls (Llama 3.2 / Llama 4 pythonic mode, Olmo 3): a Python list of calls.

    [get_weather(city="San Francisco", days=3), get_time()]
    <|python_start|>[get_weather(city='LA', metric='C')]<|python_end|>      (Llama 4)
    <function_calls>get_weather(city="Paris")
    get_time()</function_calls>                                             (Olmo 3)

Arguments are keyword arguments whose values are Python literals (JSON spellings ``true``/``false``/
``null`` too); they are converted to JSON as they stream (see ``parsers.shapes.pythonic``). Text before
or after the list is content, whitespace included; a bracket that does not open ``[NAME(`` followed
by ``)`` or ``KEY=`` is prose, and so is a list whose calls are not followed by ``,`` or ``]``.
Inside a wrapper the brackets are optional (Olmo 3 writes one call per line). A wrapper's closing
marker without its opener is markup.
"""

from __future__ import annotations

import re
from collections.abc import Generator

from detectors.turns import CHATML, LLAMA3, LLAMA4
from parsers.declare import (
    CALL_NAME,
    CallContext,
    Cursor,
    MarkerSet,
    Out,
    ToolCallDetector,
    ToolFormat,
    call_head,
    python_call_lines,
    python_call_list,
    python_list_wire,
)

WRAPPERS = {"<|python_start|>": "<|python_end|>", "<function_calls>": "</function_calls>"}
_OUTER = MarkerSet(("[", *WRAPPERS, *WRAPPERS.values()))
_BARE_LIST = re.compile(rf"\[\s*{CALL_NAME}\s*\(")


def wrapped_calls(cur: Cursor, out: Out, marker: str, end: str) -> Generator[None, None, bool]:
    """After a wrapper's opening ``marker``: a call list or calls one per line, then ``end``."""
    out.calls.begin(marker)
    yield from cur.skip_ws()
    if (yield from cur.expect("[")):
        return (yield from python_call_list(cur, out)) and (yield from cur.closing(end))
    return (yield from python_call_lines(cur, out, end))


def _read(ctx: CallContext, cur: Cursor, out: Out) -> Generator[None, None, None]:
    while True:
        marker = yield from cur.until(_OUTER, out.content.write)
        if marker is None:
            return
        if marker == "[":
            if (yield from call_head(cur)):
                out.calls.begin(marker)
                yield from python_call_list(cur, out)
            else:
                out.content.write(marker)
        elif marker in WRAPPERS:
            yield from wrapped_calls(cur, out, marker, WRAPPERS[marker])
        # else: a closer without its opener, dropped


class Pythonic(ToolCallDetector):
    end_tokens = (*LLAMA4, *LLAMA3, *CHATML)
    # a bare list is only known to be calls after its header went out; text next to a list that
    # turns out to be prose must come back unchanged, so whitespace around calls is content.
    # Written as a bare list (Llama 3.2 / 4 pythonic).
    format = ToolFormat(read=_read, start_markers=tuple(WRAPPERS), markers=tuple(WRAPPERS.values()),
                        trim_around_calls=False, wire=python_list_wire(),
                        sniff=lambda text: any(m in text for m in WRAPPERS) or _BARE_LIST.search(text) is not None)
