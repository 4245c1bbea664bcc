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
from collections.abc import Callable, Iterable
from typing import Self, cast

_CACHE: dict[tuple[type, tuple[str, ...]], MarkerSet] = {}
_CACHE_LIMIT = 1024


class MarkerSet:
    """An immutable set of markers. Construction is cached: building the same set again (many
    programs build their sets per call) returns the existing instance."""

    __slots__ = ("_extensions", "_first", "_first_re", "_longest", "_prefixes", "_regex", "first_char_at", "markers")

    markers: tuple[str, ...]
    _regex: re.Pattern[str]
    _prefixes: frozenset[str]
    _first: frozenset[str]
    _first_re: re.Pattern[str]
    #: ``first_char_at(buf, pos)``: a match at the first character that can begin a marker, or None
    first_char_at: Callable[[str, int], re.Match[str] | None]
    _longest: int
    _extensions: dict[str, tuple[str, ...]]

    def __new__(cls, markers: Iterable[str]) -> Self:
        # longest first (the regex prefers the longest marker at a place); ties in text order
        unique = tuple(sorted({m for m in markers if m}, key=lambda m: (-len(m), m)))
        cached = _CACHE.get((cls, unique))
        if cached is not None:
            return cast(Self, cached)
        if not unique:
            raise ValueError("a MarkerSet needs at least one non-empty marker")
        self = super().__new__(cls)
        self.markers = unique
        self._regex = re.compile("|".join(re.escape(m) for m in unique))
        self._prefixes = frozenset(m[:k] for m in unique for k in range(1, len(m)))
        self._first = frozenset(m[0] for m in unique)
        self._first_re = re.compile("[" + re.escape("".join(sorted(self._first))) + "]")
        self.first_char_at = self._first_re.search
        self._longest = len(unique[0])
        # markers that strictly extend another marker: finding the shorter one must wait until the
        # longer one is ruled out
        self._extensions = {m: tuple(x for x in unique if x != m and x.startswith(m)) for m in unique}
        if len(_CACHE) >= _CACHE_LIMIT:  # sets built from model text (e.g. per-key closers) stay bounded
            _CACHE.clear()
        _CACHE[(cls, unique)] = self
        return self

    def __contains__(self, text: str) -> bool:
        return text in self.markers

    def __or__(self, other: MarkerSet | Iterable[str]) -> MarkerSet:
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
        search = self._first_re.search
        found = search(buf, max(start, n - self._longest + 1))  # only a tail shorter than a marker can be one
        prefixes = self._prefixes
        while found is not None:
            i = found.start()
            if buf[i:] in prefixes:
                return i
            found = search(buf, i + 1)
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
