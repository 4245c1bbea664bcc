"""Lanes (``parsers.core.cursor``): the shortcut a suspended primitive leaves for the next chunk
must do exactly what resuming it would — the same text written, the same result, the same text
left — however the text is split; the primitives leave one where a chunk only moves the position;
and a detector bug hit in a lane is contained like one hit in the program."""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

import pytest

from parsers.core.cursor import Cursor
from parsers.core.driver import Driver, Out
from parsers.core.markers import MarkerSet
from parsers.events import Content
from tests.core_drive import PENDING, collect, drive, splits

Primitive = Callable[[Cursor], Generator[None, None, Any]]
STOP = MarkerSet(("</call>", "<call>"))
TAGS = MarkerSet(("<call>", "</call>"))

#: JSON values whose strings hold escapes (quotes, backslashes, a backslash at every possible chunk
#: edge, \u escapes) and marker text (which does not end a value inside a string), then more text
JSON_TEXTS = (
    '{"path": "a.py", "content": "say \\"hi\\" to C:\\\\dir\\\\ and </call> \\u00e9\\n\\\\"} after',
    '"a lone string with \\\\\\" and \\\\ and \\/ inside" rest',
    '{"nested": {"list": ["x\\\\", "\\"", 1, true]}, "s": "' + "long text " * 20 + '"}<call>',
    '{"broken": "runs into the end',
    '{"k": 1 </call> "v"}',
)
UNTIL_TEXTS = (
    "plain text, then a < b and <ca and <call> after",
    "no marker here at all " * 10,
    "text ending in a marker prefix <cal",
)


def drive_with_lanes(primitive: Primitive, chunks: list[str], eof: bool = True) -> tuple[Any, str, int]:
    """Like ``tests.core_drive.drive``, but after each chunk the cursor's lane is taken when it
    can be (as ``Driver.feed`` does) and the primitive resumed only when it cannot. Returns the
    result, the text left unconsumed and how many chunks a lane took."""
    cur = Cursor()
    gen = primitive(cur)
    result: Any = PENDING
    taken = 0

    def resume() -> None:
        nonlocal result
        if result is not PENDING:
            return
        cur.lane = None
        try:
            next(gen)
        except StopIteration as stop:
            result = stop.value

    for chunk in chunks:
        cur.feed(chunk)
        lane = cur.lane
        if result is PENDING and lane is not None and lane():
            taken += 1
            continue
        resume()
    if eof:
        cur.eof = True
        resume()
    return result, cur.buf[cur.pos:], taken


def _same(make: Callable[[Callable[[str], None]], Primitive], chunks: list[str]) -> int:
    resumed_parts, resumed_write = collect()
    resumed = drive(make(resumed_write), chunks)
    laned_parts, laned_write = collect()
    result, rest, taken = drive_with_lanes(make(laned_write), chunks)
    assert (result, rest, "".join(laned_parts)) == (resumed.result, resumed.rest, "".join(resumed_parts))
    return taken


@pytest.mark.parametrize("text", JSON_TEXTS)
def test_json_value_lane_does_what_resuming_does(text: str) -> None:
    taken = 0
    for chunks in splits(text, seeds=12):
        taken += _same(lambda write: lambda cur: cur.json_value(write, STOP), chunks)
    assert taken > 0  # one character per chunk inside a string: the lane takes most of them


@pytest.mark.parametrize("text", UNTIL_TEXTS)
def test_until_lane_does_what_resuming_does(text: str) -> None:
    taken = 0
    for chunks in splits(text, seeds=12):
        taken += _same(lambda write: lambda cur: cur.until(TAGS, write), chunks)
    assert taken > 0


def test_a_string_argument_streams_through_the_lane_a_chunk_at_a_time() -> None:
    parts, write = collect()
    text = '"' + "x\\\\y\\\"z " * 50 + '"'
    chunks = [text[i:i + 3] for i in range(0, len(text), 3)]
    result, rest, taken = drive_with_lanes(lambda cur: cur.json_value(write, STOP), chunks)
    assert result is True and rest == "" and "".join(parts) == text
    assert taken >= len(chunks) - 2  # every chunk but the first and the one that ends the string


def test_a_detector_bug_hit_in_a_lane_is_contained() -> None:
    written: list[str] = []

    def write(text: str) -> None:
        written.append(text)
        if len(written) == 2:
            raise RuntimeError("a detector bug")

    def program(cur: Cursor, out: Out) -> Generator[None, None, None]:
        yield from cur.until(TAGS, write)

    driver = Driver(program)
    assert driver.feed("abc") == []
    assert driver.cursor.lane is not None  # the second chunk goes through the lane
    events = driver.feed("def") + driver.feed("ghi") + driver.finish()
    assert driver.failed
    assert written == ["abc", "def"]  # the failed program's lane is not taken again
    assert "".join(e.text for e in events if isinstance(e, Content)) == "defghi"  # the rest is content
