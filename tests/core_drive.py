"""Driving one cursor primitive (or program) by hand, for the unit tests of ``parsers.core``.

``drive(primitive, chunks)`` feeds ``chunks`` one by one to a fresh ``Cursor``, resuming the
primitive after each (as the driver does), then ends the stream (``eof``) unless told not to.
It returns what the primitive returned (``PENDING`` if it is still waiting) and the text left
unconsumed. ``splits(text)`` gives the chunkings a split-invariance check runs over.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Generator, Iterable
from dataclasses import dataclass
from typing import Any

from parsers.core.cursor import Cursor

PENDING = object()  # the primitive has not returned


@dataclass
class Driven:
    result: Any
    rest: str  # the text fed but not consumed
    cursor: Cursor
    resumptions: int  # how often the primitive was resumed


def drive(primitive: Callable[[Cursor], Generator[None, None, Any]], chunks: Iterable[str], *, eof: bool = True,
          truncated: bool = False) -> Driven:
    cur = Cursor()
    gen = primitive(cur)
    result: Any = PENDING
    resumptions = 0

    def resume() -> None:
        nonlocal result, resumptions
        if result is not PENDING:
            return
        resumptions += 1
        try:
            next(gen)
        except StopIteration as stop:
            result = stop.value

    for chunk in chunks:
        cur.feed(chunk)
        resume()
    if eof:
        cur.eof, cur.truncated = True, truncated
        resume()
    return Driven(result, cur.buf[cur.pos:], cur, resumptions)


def splits(text: str, seeds: int = 5) -> list[list[str]]:
    """One chunk, one character per chunk, and seeded random splits."""
    out = [[text], list(text)]
    for seed in range(seeds):
        rng = random.Random(seed)
        chunks, i = [], 0
        while i < len(text):
            n = rng.randint(1, 5)
            chunks.append(text[i:i + n])
            i += n
        out.append(chunks)
    return out


def collect() -> tuple[list[str], Callable[[str], None]]:
    """A list and a ``Write`` appending to it."""
    parts: list[str] = []
    return parts, parts.append
