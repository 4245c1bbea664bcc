"""``app.api.blocks``: where blocks open and close, what they hold, for any writer."""

from __future__ import annotations

from typing import Any

import pytest

from app.api.blocks import CALL, REASONING, TEXT, Blocks
from parsers.events import CallArgs, CallEnd, CallStart, Content, Event, Reasoning


class Recorder:
    def __init__(self) -> None:
        self.log: list[tuple[Any, ...]] = []

    def open_block(self, kind: str, call: CallStart | None) -> None:
        self.log.append(("open", kind, call.name if call else None))

    def write_block(self, kind: str, text: str, event: Event) -> None:
        self.log.append(("write", kind, text))

    def close_block(self, kind: str, ok: bool) -> None:
        self.log.append(("close", kind, ok))


ANSWER: list[Event] = [Reasoning("Think"), Reasoning(" more"), Content("\n\n"), Content("Text"), Content("\n"),
                       CallStart(0, "f", "id1"), CallArgs(0, '{"a":'), CallArgs(0, ""), CallArgs(0, " 1}"),
                       CallEnd(0, True), Content("\n"), CallStart(1, "g"), CallArgs(1, "{"), CallEnd(1, False)]


def test_blocks_in_the_order_written_blank_runs_skipped() -> None:
    writer = Recorder()
    blocks = Blocks(writer)
    blocks.feed(ANSWER)
    blocks.close()
    assert writer.log == [
        ("open", REASONING, None), ("write", REASONING, "Think"), ("write", REASONING, " more"),
        ("close", REASONING, True),
        ("open", TEXT, None), ("write", TEXT, "\n\nText"), ("write", TEXT, "\n"), ("close", TEXT, True),
        ("open", CALL, "f"), ("write", CALL, '{"a":'), ("write", CALL, " 1}"), ("close", CALL, True),
        ("open", CALL, "g"), ("write", CALL, "{"), ("close", CALL, False),
    ]  # the blank run between the calls made no block; an empty fragment wrote nothing
    assert (blocks.calls, blocks.unfinished) == (1, 1)


def test_a_face_that_shows_blank_runs() -> None:
    writer = Recorder()
    blocks = Blocks(writer, skip_blank=False)
    blocks.feed([Content("\n"), CallStart(0, "f"), CallEnd(0, True), Content(" ")])
    assert writer.log[:2] == [("open", TEXT, None), ("write", TEXT, "\n")]
    assert writer.log[-2:] == [("open", TEXT, None), ("write", TEXT, " ")]


@pytest.mark.parametrize("split", [1, 2, 5])
def test_any_batching_gives_the_same_blocks(split: int) -> None:
    whole, pieces = Recorder(), Recorder()
    Blocks(whole).feed(ANSWER)
    blocks = Blocks(pieces)
    for i in range(0, len(ANSWER), split):
        blocks.feed(ANSWER[i:i + split])
    assert pieces.log == whole.log


def test_a_block_that_never_opened_leaves_nothing() -> None:
    writer = Recorder()
    blocks = Blocks(writer)
    blocks.feed([Content("  "), Reasoning("\n")])
    blocks.close()
    assert writer.log == []
