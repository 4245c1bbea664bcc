"""Finding literal markers in streamed text, with holdback.

A ``MarkerSet`` answers two questions about a buffer, both in time bounded by the text examined
plus the longest marker:

* ``find(buf, start)`` — the leftmost marker at or after ``start`` (the longest one where several
  begin at the same place), or ``None``;
* ``safe_end(buf, start)`` — how far text may be released: everything before a tail that is a
  proper prefix of some marker (that tail could still become a marker when more text arrives).

Callers resume searching from the held tail, so every character is examined a bounded number of
times however the text is split.
"""

from __future__ import annotations

import re
from collections.abc import Iterable


class MarkerSet:
    __slots__ = ("markers", "_regex", "_prefixes", "_first", "_longest", "_extensions")

    def __init__(self, markers: Iterable[str]):
        unique = sorted({m for m in markers if m}, key=len, reverse=True)
        if not unique:
            raise ValueError("a MarkerSet needs at least one non-empty marker")
        self.markers: tuple[str, ...] = tuple(unique)
        self._regex = re.compile("|".join(re.escape(m) for m in unique))
        self._prefixes = frozenset(m[:k] for m in unique for k in range(1, len(m)))
        self._first = frozenset(m[0] for m in unique)
        self._longest = len(unique[0])
        # markers that strictly extend another marker: finding the shorter one must wait until the
        # longer one is ruled out
        self._extensions = {m: tuple(x for x in unique if x != m and x.startswith(m)) for m in unique}

    def __contains__(self, text: str) -> bool:
        return text in self.markers

    def __or__(self, other: "MarkerSet | Iterable[str]") -> "MarkerSet":
        extra = other.markers if isinstance(other, MarkerSet) else tuple(other)
        return MarkerSet(self.markers + extra)

    @property
    def longest(self) -> int:
        return self._longest

    def find(self, buf: str, start: int, eof: bool = False) -> tuple[int, str] | None:
        """Leftmost marker at or after ``start``; ``None`` if there is none yet.

        When a found marker is a prefix of a longer marker that the buffer cannot yet rule out,
        the answer waits (returns ``None``) unless ``eof``.
        """
        match = self._regex.search(buf, start)
        if match is None:
            return None
        at, marker = match.start(), match.group()
        if not eof:
            tail = buf[at:]
            for longer in self._extensions[marker]:
                if len(tail) < len(longer) and longer.startswith(tail):
                    return None
        return at, marker

    def safe_end(self, buf: str, start: int) -> int:
        """Index up to which ``buf[start:]`` cannot contain the beginning of a marker."""
        n = len(buf)
        first = self._first
        prefixes = self._prefixes
        for i in range(max(start, n - self._longest + 1), n):
            if buf[i] in first and buf[i:] in prefixes:
                return i
        return n

    def starts_at(self, buf: str, i: int, eof: bool = False) -> str | None | bool:
        """Which marker begins exactly at ``buf[i]``: the marker, ``None`` if none can, or ``True``
        if the buffer ends inside what may still become a marker (undecided until more text or eof)."""
        if buf[i] not in self._first:
            return None
        tail = buf[i : i + self._longest]
        best = None
        for marker in self.markers:  # longest first
            if tail.startswith(marker):
                best = best or marker
            elif not eof and len(tail) < len(marker) and marker.startswith(tail) and i + len(tail) == len(buf):
                return True
        return best

    @property
    def first_chars(self) -> str:
        return "".join(sorted(self._first))

    def could_start(self, text: str) -> bool:
        """True if ``text`` is a proper prefix of some marker."""
        return text in self._prefixes
