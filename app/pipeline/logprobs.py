"""Which generated tokens became the visible content, for Chat Completions' ``logprobs``.

The backend reports each token with the piece of text it produced (``TextDelta.pieces``); the
parsers turn text into content, reasoning and tool calls without saying which input characters an
event came from. ``ContentLogprobs`` finds that out. The run feeds the parsers one piece at a time,
so every batch of events comes from text read up to the end of that piece; the batch's content and
reasoning texts are then located in the output, last event first, each ending no later than the one
after it and starting no earlier than where the previous batch's last placed text ended. That is
exact for the text as written (content and reasoning are the model's own characters, in order); a
content text the parsers joined across markup they removed is matched character by character.

The rule a client sees: **a token gets one entry in ``logprobs.content`` when any of its text went
into the content**; tokens whose text all went to reasoning, tool-call markup or arguments, or was
dropped (markers, whitespace the format trims) get none. A token whose text straddles a boundary
(``"."`` + the start of a marker in one token) counts as content. Entries come in output order, each
once, attached to the content event that first shows the token's text (``LoggedContent``), so a
stream carries them with the chunks of the text they belong to and the non-streaming answer's list is
their concatenation — streaming equals non-streaming.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field
from typing import Any

from app.backends.generation import TokenLogprob
from parsers.events import Content, Event, Reasoning


@dataclass(slots=True)
class LoggedContent(Content):
    """Content text and the ``logprobs.content`` entries of the tokens it is the first to show."""

    logprobs: list[dict[str, Any]] = field(default_factory=list)


def openai_entry(token: TokenLogprob, top: int) -> dict[str, Any]:
    """One token as Chat Completions writes it."""
    return {
        "token": token.token, "logprob": token.logprob, "bytes": token.bytes,
        "top_logprobs": [{"token": t.token, "logprob": t.logprob, "bytes": t.bytes} for t in token.top[:top]],
    }


#: how far back (characters) a content text that is not in the output verbatim is matched character
#: by character; beyond it the text is attributed to the piece just read (bounds the work per event)
SCAN_LIMIT = 4096


class ContentLogprobs:
    """Attributes one answer's tokens to its content (see the module docstring)."""

    __slots__ = ("cursor", "decided", "groups", "length", "starts", "texts", "top")

    def __init__(self, top: int) -> None:
        self.top = top
        self.texts: list[str] = []  # the answer's text so far, piece by piece
        self.starts: list[int] = []  # where each piece starts in the answer's text
        self.groups: list[list[TokenLogprob]] = []  # the tokens of each piece
        self.length = 0
        self.cursor = 0  # text before it has been placed (or passed over)
        self.decided = 0  # pieces before it have their entries given, or never will

    def add(self, text: str, tokens: list[TokenLogprob]) -> None:
        """The next piece of output (fed to the parsers right after)."""
        self.starts.append(self.length)
        self.texts.append(text)
        self.groups.append(tokens)
        self.length += len(text)

    def place(self, events: list[Event]) -> list[Event]:
        """``events`` (what the parsers released after the pieces added so far) with each content
        event carrying the entries of the tokens it is the first to show."""
        window: tuple[str, int] | None = None  # the text from the cursor's piece on, and where it starts
        spans: dict[int, list[tuple[int, int]]] = {}
        end = self.length
        for i in range(len(events) - 1, -1, -1):  # last first: each text ends before the next one begins
            event = events[i]
            if (type(event) is Content or type(event) is Reasoning) and event.text:
                if window is None:
                    first = max(bisect_right(self.starts, self.cursor) - 1, 0)
                    window = "".join(self.texts[first:]), self.starts[first] if self.starts else 0
                found = self._locate(window, event.text, end)
                if found:
                    spans[i] = found
                    end = found[0][0]
        if window is None:
            return events
        out: list[Event] = []
        for i, event in enumerate(events):
            found = spans.get(i)
            if found is not None:
                self.cursor = max(self.cursor, found[-1][1])
            if type(event) is Content:
                entries = self._entries(found) if found is not None else self._entries_of_last_piece()
                out.append(LoggedContent(event.text, entries))
            else:
                out.append(event)
        return out

    def _locate(self, window: tuple[str, int], text: str, end: int) -> list[tuple[int, int]] | None:
        """Where ``text`` sits in the output between the cursor and ``end``, as the latest match:
        verbatim, else character by character (over markup the parsers removed)."""
        output, base = window
        start, end = self.cursor - base, end - base
        at = output.rfind(text, start, end)
        if at >= 0:
            return [(base + at, base + at + len(text))]
        low = max(start, end - SCAN_LIMIT)
        spans: list[tuple[int, int]] = []
        pos = end
        for char in reversed(text):
            pos = output.rfind(char, low, pos)
            if pos < 0:
                return None
            if spans and spans[-1][0] == base + pos + 1:
                spans[-1] = (base + pos, spans[-1][1])
            else:
                spans.append((base + pos, base + pos + 1))
        spans.reverse()
        return spans

    def _entries(self, spans: list[tuple[int, int]]) -> list[dict[str, Any]]:
        entries: list[dict[str, Any]] = []
        for begin, end in spans:
            first = max(bisect_right(self.starts, begin) - 1, self.decided)
            last = bisect_right(self.starts, end - 1) - 1
            for piece in range(first, last + 1):
                entries += (openai_entry(token, self.top) for token in self.groups[piece])
            self.decided = max(self.decided, last + 1)
        return entries

    def _entries_of_last_piece(self) -> list[dict[str, Any]]:
        """A content text not found in the output (a format that rewrites its text): the piece just
        read is the best guess at where it came from (and nothing before it is searched again)."""
        last = len(self.groups) - 1
        if last < 0:
            return []
        self.cursor = max(self.cursor, self.starts[last])
        if last < self.decided:
            return []
        self.decided = last + 1
        return [openai_entry(token, self.top) for token in self.groups[last]]
