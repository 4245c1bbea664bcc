"""Text output channels: content and reasoning, with whitespace trimming at marker boundaries.

Formats differ in whether the whitespace next to a marker belongs to the text (``"Hello \\n<tool_call>"``)
or to the markup. A ``TextChannel`` makes that a declaration: after ``boundary()`` it drops the
whitespace that follows, and — when ``trim_before_boundary`` is on — it holds back trailing
whitespace until it knows whether a boundary (drop it) or more text (release it) comes next.
The decisions depend only on the text, never on how it was split into chunks.
"""

from __future__ import annotations

from collections.abc import Callable

_WS = " \t\r\n"


class TextChannel:
    __slots__ = ("_emit", "_held", "_strip_leading", "trim_after_boundary", "trim_before_boundary")

    def __init__(
        self,
        emit: Callable[[str], None],
        *,
        trim_before_boundary: bool = False,
        trim_after_boundary: bool = False,
        strip_leading: bool = False,
    ) -> None:
        self._emit = emit
        self.trim_before_boundary = trim_before_boundary
        self.trim_after_boundary = trim_after_boundary
        self._strip_leading = strip_leading
        self._held = ""

    def write(self, text: str) -> None:
        if not text:
            return
        if self._strip_leading:
            text = text.lstrip(_WS)
            if not text:
                return
            self._strip_leading = False
        if not self.trim_before_boundary:
            self._emit(text)
            return
        body = text.rstrip(_WS)
        if not body:
            self._held += text
            return
        released = self._held + body if self._held else body
        self._held = text[len(body) :]
        self._emit(released)

    def boundary(self) -> str:
        """A marker sits here: trim whitespace on the sides the channel is configured to trim.
        Returns the whitespace dropped before the marker (a caller may need to give it back)."""
        dropped = ""
        if self._held:
            if self.trim_before_boundary:
                dropped = self._held
            else:
                self._emit(self._held)
        self._held = ""
        if self.trim_after_boundary:
            self._strip_leading = True
        return dropped

    def strip_next(self) -> None:
        """Drop the whitespace that the next text starts with."""
        self._strip_leading = True

    def drop_held(self) -> None:
        """Discard held trailing whitespace (the text ended at a marker that owns it)."""
        self._held = ""

    def close(self, keep_trailing: bool = True) -> None:
        """End of stream: release (or drop) whatever trailing whitespace is still held."""
        if self._held and keep_trailing:
            self._emit(self._held)
        self._held = ""
