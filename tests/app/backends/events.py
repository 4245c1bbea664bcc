"""Helpers for the dialect tests: a decoder fed event sequences the way ``Backend.generate`` feeds
it (one list per network read), its items collected."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from app.backends.dialect import Decoder
from app.backends.generation import Finish, TextDelta

Event = dict[str, Any] | None


def run(decoder: Decoder, *reads: list[Event]) -> tuple[list[TextDelta], list[Finish]]:
    """Feed ``reads`` in order, stopping when the decoder says the stream is over (as the shared
    loop does), then end it: the deltas and the finishes."""
    deltas: list[TextDelta] = []
    for events in reads:
        deltas += decoder.decode(events)
        if decoder.stop:
            break
    return deltas, decoder.end()


def text_of(deltas: list[TextDelta], index: int = 0) -> str:
    return "".join(d.text for d in deltas if d.index == index)


RECORDED = Path(__file__).resolve().parent.parent.parent / "data" / "backends"


def recorded(name: str) -> list[Event]:
    """The events of a stream recorded from a real backend (``tests/data/backends/NAME``; the model's
    local path shortened to ``/models/``), as ``sse_batches`` decodes them."""
    events: list[Event] = []
    for line in (RECORDED / name).read_text(encoding="utf-8").splitlines():
        if line.startswith("data: "):
            events.append(None if line[6:] == "[DONE]" else json.loads(line[6:]))
    return events


def answer(name: str) -> Any:
    """A JSON answer recorded from a real backend (``tests/data/backends/NAME``)."""
    return json.loads((RECORDED / name).read_text(encoding="utf-8"))
