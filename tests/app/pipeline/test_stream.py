"""``AnswerStream``'s pause after the first bytes that show the client something: taken once, after
those bytes were handed to the writer and before anything more is read from the backend — never
after the opening alone, never when the stream is over."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from app.metrics import Metrics
from app.pipeline import stream as stream_module
from app.pipeline.stream import AnswerStream


class Items:
    """Scripted ``Choices``: what the first backend items gave (``lead``), then batches of events;
    every batch pulled is logged, so the log shows what was read before and after a pause."""

    def __init__(self, log: list[str], lead: list[str], batches: list[list[str]]) -> None:
        self.log = log
        self.first = lead
        self.batches = batches
        self.runs = [object()]

    def lead(self) -> list[tuple[int, list[str]]]:
        return [(0, self.first)] if self.first else []

    async def __aiter__(self) -> AsyncIterator[tuple[int, list[str], object | None]]:
        for k, batch in enumerate(self.batches):
            self.log.append(f"read {batch}")
            yield 0, batch, ("done" if k == len(self.batches) - 1 else None)

    def total(self) -> None:
        return None

    async def aclose(self) -> None:
        return None


class Text:
    """An encoder whose bytes are the events' text; the opening is ``<`` and the end ``>``."""

    def head(self) -> bytes:
        return b"<"

    def events(self, index: int, events: list[str]) -> bytes:
        return "".join(events).encode()

    def end_choice(self, index: int, finished: object) -> bytes:
        return b""

    async def end(self, total: object) -> bytes:
        return b">"

    def error(self, exc: Any) -> bytes:
        return b"!"


def written(lead: list[str], batches: list[list[str]], monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What happens, in order: the lead written, batches read, bytes written, pauses taken."""
    log: list[str] = []

    async def breathe(self: AnswerStream) -> None:
        self.breathed = True
        self.pending_breath = False
        log.append("pause")

    monkeypatch.setattr(AnswerStream, "_breathe", breathe)

    async def run() -> None:
        body = AnswerStream(Items(log, lead, batches), Text(), Metrics(), lambda: None)  # type: ignore[arg-type]
        log.append(f"write {body.lead().decode()}")
        async for data in body:
            log.append(f"write {data.decode()}")

    asyncio.run(run())
    return log


def test_the_pause_comes_after_the_first_text_is_written_and_before_more_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    log = written([], [[], ["a"], ["b"], ["c"]], monkeypatch)
    # the lead is the opening alone (the first item showed nothing): no pause until the first text
    assert log == ["write <", "read []", "read ['a']", "write a", "pause", "read ['b']", "write b", "read ['c']",
                   "write c>"]


def test_a_lead_that_shows_something_is_followed_by_the_pause(monkeypatch: pytest.MonkeyPatch) -> None:
    log = written(["a"], [["b"], ["c"]], monkeypatch)
    assert log == ["write <a", "pause", "read ['b']", "write b", "read ['c']", "write c>"]


def test_no_pause_when_the_first_text_ends_the_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    assert "pause" not in written([], [["a"]], monkeypatch)
    assert "pause" not in written([], [[], []], monkeypatch)


def test_the_pause_is_a_short_sleep() -> None:
    """The real pause sleeps ``BREATHER`` (a millisecond: uvloop's timers count whole ones)."""
    slept: list[float] = []

    async def run() -> None:
        body = AnswerStream(Items([], [], []), Text(), Metrics(), lambda: None)  # type: ignore[arg-type]
        real_sleep = asyncio.sleep

        async def sleep(seconds: float) -> None:
            slept.append(seconds)
            await real_sleep(0)

        stream_module.asyncio.sleep = sleep  # type: ignore[assignment]
        try:
            await body._breathe()
            await body._breathe()
        finally:
            stream_module.asyncio.sleep = real_sleep  # type: ignore[assignment]
        assert body.breathed

    asyncio.run(run())
    assert slept == [stream_module.BREATHER, stream_module.BREATHER] and stream_module.BREATHER == 0.001


# ------------------------------------------------------------------ a whole answer's pause (``Choices.collect``)

class ScriptedRun:
    """A run whose first item gave ``lead`` (``finished`` already when ``done``), then ``batches``;
    every batch pulled is logged."""

    def __init__(self, log: list[str], lead: list[str], batches: list[list[str]], done: bool = False) -> None:
        self.log, self.first, self.batches = log, lead, batches
        self.finished: object | None = "done" if done else None

    def lead(self) -> list[str]:
        return self.first

    async def __aiter__(self) -> AsyncIterator[list[str]]:
        for k, batch in enumerate(self.batches):
            self.log.append(f"read {batch}")
            if k == len(self.batches) - 1:
                self.finished = "done"
            yield batch

    async def aclose(self) -> None:
        return None


def collected(run: ScriptedRun, log: list[str], monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    from app.pipeline import choices as choices_module

    async def sleep(seconds: float) -> None:
        log.append(f"pause {seconds}")

    monkeypatch.setattr(choices_module.asyncio, "sleep", sleep)
    return asyncio.run(choices_module.Choices([run]).collect())  # type: ignore[list-item]


def test_a_whole_answer_pauses_once_after_its_first_item(monkeypatch: pytest.MonkeyPatch) -> None:
    """Collected whole, an answer waits ``BREATHER`` once, after its first item and before it reads
    on (a burst behind it is then read in fewer pieces) — and not at all when that item ended it."""
    log: list[str] = []
    assert collected(ScriptedRun(log, ["a"], [["b"], ["c"]]), log, monkeypatch) == [(["a", "b", "c"], "done")]
    assert log == ["pause 0.001", "read ['b']", "read ['c']"]
    log.clear()
    assert collected(ScriptedRun(log, ["a"], [], done=True), log, monkeypatch) == [(["a"], "done")]
    assert log == []
