"""Parser events → blocks: the one rule every face's encoder follows, streaming or not.

An answer is a sequence of blocks in the order the model wrote them: a run of reasoning is one
``REASONING`` block, a run of content one ``TEXT`` block, each call one ``CALL`` block. A text or
reasoning block opens with its first non-blank text — a run of nothing but whitespace (the newlines
between ``</think>`` and a call) makes no block — unless the face shows blank runs too
(``skip_blank=False``: Chat Completions streams content as it comes). A call block opens with its
``CallStart`` and closes with its ``CallEnd`` (``ok=False``: unfinished or malformed); any other
block closes when a block of another kind opens, or at ``close()``.

``Blocks`` tells its ``BlockWriter`` where blocks open (``open_block``), what they hold
(``write_block``, with the event the text came from) and where they close (``close_block``); the
writer writes its wire format.
It counts the calls that completed (``calls``) and those that did not (``unfinished``).
"""

from __future__ import annotations

from typing import Protocol

from parsers.events import CallArgs, CallEnd, CallStart, Content, Event, Reasoning

TEXT = "text"
REASONING = "reasoning"
CALL = "call"


class BlockWriter(Protocol):
    def open_block(self, kind: str, call: CallStart | None) -> None: ...

    def write_block(self, kind: str, text: str, event: Event) -> None: ...

    def close_block(self, kind: str, ok: bool) -> None: ...


class Blocks:
    """See the module docstring."""

    __slots__ = ("calls", "kind", "opened", "pending", "skip_blank", "unfinished", "writer")

    def __init__(self, writer: BlockWriter, skip_blank: bool = True) -> None:
        self.writer = writer
        self.skip_blank = skip_blank
        self.kind: str | None = None  # the block being written
        self.opened = False  # its opening has been written
        self.pending = ""  # leading whitespace of a text block not opened yet
        self.calls = 0
        self.unfinished = 0

    def feed(self, events: list[Event]) -> None:
        for e in events:
            kind = type(e)
            if kind is Reasoning:
                self._text(REASONING, e.text, e)  # type: ignore[union-attr]
            elif kind is CallArgs:
                if self.kind == CALL and e.text:  # type: ignore[union-attr]
                    self.writer.write_block(CALL, e.text, e)  # type: ignore[union-attr]
            elif kind is CallStart:
                self.close()
                self.kind, self.opened = CALL, True
                self.writer.open_block(CALL, e)  # type: ignore[arg-type]
            elif kind is CallEnd:
                ok = e.ok  # type: ignore[union-attr]
                if ok:
                    self.calls += 1
                else:
                    self.unfinished += 1
                self.close(ok)
            elif isinstance(e, Content):  # Content, and the app's subclasses of it
                self._text(TEXT, e.text, e)

    def _text(self, kind: str, text: str, event: Event) -> None:
        if not text:
            return
        if self.kind != kind:
            self.close()
            self.kind, self.opened, self.pending = kind, False, ""
        if not self.opened:
            if self.skip_blank and text.isspace():
                self.pending += text
                return
            if self.pending:
                text, self.pending = self.pending + text, ""
            self.opened = True
            self.writer.open_block(kind, None)
        self.writer.write_block(kind, text, event)

    def close(self, ok: bool = True) -> None:
        """Close the open block, if any (a block that never opened leaves nothing)."""
        if self.kind is not None and self.opened:
            self.writer.close_block(self.kind, ok)
        self.kind, self.opened, self.pending = None, False, ""
