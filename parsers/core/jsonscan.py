"""Where does one JSON value end? A streaming string / escape / depth state machine.

``JsonValueScan.advance(buf, pos)`` examines ``buf[pos:]`` once, resuming where the previous call
stopped, and returns how far the value extends in this buffer and whether it is complete. The
scanner does not validate JSON (the caller validates the complete text once); it only tracks
enough state — inside a string, after a backslash, bracket depth — to know where the value ends.
Searching is done with compiled regular expressions, so the per-character work happens in C.

``stop_chars`` lets a caller abort a value that runs into a format marker outside any string
(e.g. ``</tool_call>`` after a missing ``}``): the scan stops *before* such a character and
reports ``STOPPED`` so the caller can decide what follows.
"""

from __future__ import annotations

import re
from enum import IntEnum

_IN_STRING = re.compile(r'["\\]')
_SCALAR_CHARS = re.compile(r"[-+.0-9A-Za-z]*")
#: string text: no quote, every backslash with the character it escapes (stops at a quote, or at a
#: backslash that is the last character)
_STRING_RUN = re.compile(r'[^"\\]*(?:\\.[^"\\]*)*', re.DOTALL)


class Scan(IntEnum):
    MORE = 0  # the value continues past the end of the buffer
    DONE = 1  # the value ended at the returned position
    STOPPED = 2  # a stop character outside strings was reached at the returned position


class JsonValueScan:
    """Incremental end-of-value finder for one JSON value (object, array, string or scalar)."""

    __slots__ = ("_structure", "depth", "escape", "in_string", "kind")

    def __init__(self, stop_chars: str = "") -> None:
        self.depth = 0
        self.in_string = False
        self.escape = False
        self.kind = ""  # "", "container", "string", "scalar"
        self._structure = re.compile("[" + re.escape('"{}[]' + stop_chars) + "]")

    def string_runs_on(self, buf: str, pos: int) -> bool:
        """When the value is inside a string and ``buf[pos:]`` does not end it: take that text in
        (as ``advance`` would, which then returns ``(len(buf), MORE)``) and return ``True``.
        Otherwise return ``False`` and change nothing."""
        if not self.in_string:
            return False
        n = len(buf)
        if self.escape:
            if pos >= n:
                return True
            pos += 1  # the character the backslash escapes
        found = _STRING_RUN.match(buf, pos)  # matches at least ""
        assert found is not None
        end = found.end()
        if end == n:
            self.escape = False
            return True
        if buf[end] == "\\":  # a backslash as the last character: its pair is in the next chunk
            self.escape = True
            return True
        return False  # a quote: the string ends here, and ``advance`` decides what follows

    def advance(self, buf: str, pos: int, eof: bool = False) -> tuple[int, Scan]:  # noqa: C901 — the JSON scanner's state machine: one branch per state, linear and allocation-free by design
        """Scan from ``pos`` (the value's first character on the first call, which must not be
        whitespace); returns ``(end, state)`` where ``buf[pos:end]`` belongs to the value."""
        n = len(buf)
        if not self.kind:
            if pos >= n:
                return pos, Scan.MORE
            c = buf[pos]
            if c in "{[":
                self.kind, self.depth = "container", 1
                pos += 1
            elif c == '"':
                self.kind, self.in_string = "string", True
                pos += 1
            else:
                self.kind = "scalar"
        if self.kind == "scalar":
            found = _SCALAR_CHARS.match(buf, pos)  # matches at least ""
            assert found is not None
            end = found.end()
            if end < n or eof:
                return end, Scan.DONE
            return end, Scan.MORE
        structure = self._structure
        while True:
            if self.in_string:
                if self.escape:
                    if pos >= n:
                        return n, Scan.MORE
                    pos += 1
                    self.escape = False
                match = _IN_STRING.search(buf, pos)
                if match is None:
                    return n, Scan.MORE
                pos = match.end()
                if match.group() == "\\":
                    self.escape = True
                    continue
                self.in_string = False
                if self.depth == 0:
                    return pos, Scan.DONE
            else:
                match = structure.search(buf, pos)
                if match is None:
                    return n, Scan.MORE
                c = match.group()
                if c == '"':
                    self.in_string = True
                elif c == "{" or c == "[":
                    self.depth += 1
                elif c == "}" or c == "]":
                    self.depth -= 1
                    if self.depth == 0:
                        return match.end(), Scan.DONE
                else:
                    return match.start(), Scan.STOPPED
                pos = match.end()
