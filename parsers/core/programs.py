"""Reusable detector programs for the common shapes; a detector declares its markers and picks one.

Each builder returns a function ``body(detector, cursor, out)`` to be assigned as a detector's
``body`` attribute.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

from parsers.core.cursor import Cursor
from parsers.core.jsoncall import JsonCallShape, json_call
from parsers.core.markers import MarkerSet
from parsers.core.program import Out

Body = Callable[[Any, Cursor, Out], Generator[None, None, None]]


def tagged_json_calls(start: str | tuple[str, ...], end: str, shape: JsonCallShape = JsonCallShape()) -> Body:
    """``START {"name": …, "arguments": {…}} END``, repeated; anything else is content.

    A start or end marker outside any JSON string breaks the call (it is passed through as
    content and scanning resumes at that marker)."""
    starts = (start,) if isinstance(start, str) else tuple(start)
    start_set = MarkerSet(starts)
    stop = MarkerSet((*starts, end))

    def body(detector: Any, cur: Cursor, out: Out) -> Generator[None, None, None]:
        while True:
            marker = yield from cur.until(start_set, out.content.write)
            if marker is None:
                return
            out.calls.begin(marker)
            ok = yield from json_call(cur, out, shape, stop)
            if ok:
                ok = yield from cur.closing(end)
            out.calls.end(ok)

    return body
