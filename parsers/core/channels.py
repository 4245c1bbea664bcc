"""Text output channels: content and reasoning, with whitespace trimming at marker boundaries.

Formats differ in whether the whitespace next to a marker belongs to the text (``"Hello \\n<tool_call>"``)
or to the markup. A ``TextChannel`` makes that a declaration: after ``boundary()`` it drops the
whitespace that follows, and — when ``trim_before_boundary`` is on — it holds back trailing
whitespace until it knows whether a boundary (drop it) or more text (release it) comes next.

A channel may also carry a format's *envelope markup* (``markup``): marker texts that wrap the
answer (``<|START_RESPONSE|>`` … ``<|END_RESPONSE|>``, ``<|open|>response<|sep|>`` …). Wherever
the text written to the channel holds one, it is dropped together with the whitespace on both
sides of it; a tail that may still become one is held back until the next text, boundary or close.
The decisions depend only on the text, never on how it was split into chunks.
"""

from __future__ import annotations

from collections.abc import Callable

from parsers.core.markers import MarkerSet

_WS = " \t\r\n"


class TextChannel:
    __slots__ = ("_emit", "_held", "_markup", "_partial", "_strip_leading", "trim_after_boundary",
                 "trim_before_boundary")

    def __init__(
        self,
        emit: Callable[[str], None],
        *,
        trim_before_boundary: bool = False,
        trim_after_boundary: bool = False,
        strip_leading: bool = False,
        markup: MarkerSet | None = None,
    ) -> None:
        self._emit = emit
        self.trim_before_boundary = trim_before_boundary
        self.trim_after_boundary = trim_after_boundary
        self._strip_leading = strip_leading
        self._held = ""  # trailing whitespace, until what follows it is known
        self._markup = markup
        self._partial = ""  # a tail that may still become a markup marker

    def write(self, text: str) -> None:
        if not text:
            return
        markup = self._markup
        if markup is None:  # no envelope: nothing to look for
            self._put(text)
            return
        if self._partial:
            text, self._partial = self._partial + text, ""
        pos = 0
        while markup.first_char_at(text, pos) is not None:
            found = markup.find(text, pos)
            if found is None:
                break
            at, marker = found
            self._put(text[pos:at])
            self._held = ""  # the whitespace before an envelope marker is markup
            self._strip_leading = True  # and so is the whitespace after it
            pos = at + len(marker)
        end = markup.safe_end(text, pos)
        self._put(text[pos:end])
        self._partial = text[end:]

    def _put(self, text: str) -> None:
        if not text:
            return
        if self._strip_leading:
            text = text.lstrip(_WS)
            if not text:
                return
            self._strip_leading = False
        if not self.trim_before_boundary and self._markup is None:
            self._emit(text)
            return
        body = text.rstrip(_WS)
        if not body:
            self._held += text
            return
        released = self._held + body if self._held else body
        self._held = text[len(body) :]
        self._emit(released)

    def _release_partial(self) -> None:
        if self._partial:
            partial, self._partial = self._partial, ""
            self._put(partial)

    def boundary(self) -> str:
        """A marker sits here: trim whitespace on the sides the channel is configured to trim.
        Returns the whitespace dropped before the marker (a caller may need to give it back)."""
        self._release_partial()
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
        self._release_partial()
        self._held = ""

    def forget_held(self) -> None:
        """Forget held trailing whitespace without releasing anything (the text it ended is not
        returned; see ``Driver.forget_held``)."""
        self._held = ""

    def close(self, keep_trailing: bool = True) -> None:
        """End of stream: release (or drop) whatever trailing whitespace is still held."""
        self._release_partial()
        if self._held and keep_trailing:
            self._emit(self._held)
        self._held = ""
