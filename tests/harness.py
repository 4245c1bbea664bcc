"""The shared fixture harness: one parse, many chunkings, one answer.

``run_all_chunkings`` feeds an output to a fresh ``ResponseParser`` non-streaming and in every
chunking (one chunk, per character, seeded random splits, splits at every marker edge) and returns
the folded messages; ``check_stream_invariants`` checks the event stream itself against the
OpenAI-facing contract (numbering, header first, no marker leaks).
"""

from __future__ import annotations

import itertools
import json
import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from parsers import (
    CallArgs,
    CallEnd,
    CallStart,
    Content,
    Event,
    FoldedMessage,
    Reasoning,
    ResponseParser,
    fold,
)
from parsers.fold import CallHolder

RANDOM_SEEDS = (0, 1, 2, 3, 4)


@dataclass(frozen=True)
class Chunking:
    name: str
    split: Callable[[str], list[str]]


def split_random(text: str, seed: int, max_len: int = 8) -> list[str]:
    rng = random.Random(seed)
    chunks, i = [], 0
    while i < len(text):
        n = rng.randint(1, max_len)
        chunks.append(text[i : i + n])
        i += n
    return chunks


def split_at_markers(text: str, markers: Iterable[str]) -> list[str]:
    """Cut right before and right after every marker occurrence (what token streams look like)."""
    cuts = {0, len(text)}
    for marker in markers:
        start = text.find(marker)
        while start != -1:
            cuts.update((start, start + len(marker)))
            start = text.find(marker, start + 1)
    points = sorted(cuts)
    return [text[a:b] for a, b in itertools.pairwise(points) if b > a]


def split_inside_markers(text: str, markers: Iterable[str]) -> list[str]:
    """Cut in the middle of every marker occurrence (stresses holdback)."""
    cuts = {0, len(text)}
    for marker in markers:
        start = text.find(marker)
        while start != -1:
            for k in range(1, len(marker)):
                cuts.add(start + k)
            start = text.find(marker, start + 1)
    points = sorted(cuts)
    return [text[a:b] for a, b in itertools.pairwise(points) if b > a]


def chunkings(markers: Sequence[str]) -> list[Chunking]:
    out = [
        Chunking("one", lambda t: [t]),
        Chunking("char", lambda t: list(t)),
        Chunking("markers", lambda t: split_at_markers(t, markers)),
        Chunking("inside-markers", lambda t: split_inside_markers(t, markers)),
    ]
    out += [Chunking(f"rand:{s}", lambda t, s=s: split_random(t, s)) for s in RANDOM_SEEDS]
    return out


def stream(make: Callable[[], ResponseParser], chunks: Iterable[str], truncated: bool = False) -> list[Event]:
    parser = make()
    events: list[Event] = []
    for chunk in chunks:
        events += parser.feed(chunk)
    events += parser.end(truncated)
    return events


def run_all_chunkings(
    make: Callable[[], ResponseParser], text: str, markers: Sequence[str], truncated: bool = False
) -> tuple[FoldedMessage, dict[str, list[Event]]]:
    """Non-streaming message, and the raw event streams per chunking name."""
    whole = fold(stream(make, [text], truncated))
    streams = {c.name: stream(make, c.split(text), truncated) for c in chunkings(markers)}
    return whole, streams


def comparable(message: FoldedMessage) -> dict:
    return {
        "content": message.content,
        "reasoning": message.reasoning,
        "calls": [(c.name, c.arguments, c.id) for c in message.calls],
    }


def check_stream_invariants(events: list[Event], markers: Sequence[str], allowed_in_text: str = "") -> list[str]:
    """Contract violations in one event stream (empty list = fine).

    * calls are numbered 0, 1, 2 … in order; a call's first event is its ``CallStart`` with a name;
      fragments and end follow, with nothing else interleaved;
    * every call that ends ok has arguments that concatenate to one JSON object;
    * no marker appears in content, reasoning, names or argument fragments' decoded strings,
      unless the expected message itself contains it (``allowed_in_text``).
    """
    problems: list[str] = []
    expected_index = 0
    open_call: int | None = None
    args: list[str] = []
    content = "".join(e.text for e in events if isinstance(e, Content))
    reasoning = "".join(e.text for e in events if isinstance(e, Reasoning))
    for event in events:
        if isinstance(event, CallStart):
            if open_call is not None:
                problems.append(f"call {event.index} starts while call {open_call} is open")
            if event.index != expected_index:
                problems.append(f"call numbered {event.index}, expected {expected_index}")
            if not event.name:
                problems.append("call without a name")
            open_call, args = event.index, []
            for marker in markers:
                if marker in event.name:
                    problems.append(f"marker {marker!r} in name {event.name!r}")
        elif isinstance(event, CallArgs):
            if open_call != event.index:
                problems.append(f"arguments for call {event.index} outside its call")
            args.append(event.text)
        elif isinstance(event, CallEnd):
            if open_call != event.index:
                problems.append(f"end of call {event.index} outside its call")
            if event.ok:
                try:
                    if not isinstance(json.loads("".join(args)), dict):
                        problems.append(f"call {event.index} arguments are not an object")
                except ValueError:
                    problems.append(f"call {event.index} arguments are not JSON: {''.join(args)!r}")
            open_call = None
            expected_index += 1
        elif open_call is not None:
            problems.append(f"{type(event).__name__} inside call {open_call}")
    if open_call is not None:
        problems.append(f"call {open_call} never ended")
    for marker in markers:
        if marker in allowed_in_text:
            continue
        if marker in content:
            problems.append(f"marker {marker!r} leaked into content")
        if marker in reasoning:
            problems.append(f"marker {marker!r} leaked into reasoning")
    return problems


def held(events: list[Event]) -> list[Event]:
    """The same events as a held-calls stream delivers them."""
    return CallHolder()(events)
