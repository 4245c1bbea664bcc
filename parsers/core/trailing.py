"""End-of-turn tokens at the very end of an output: never content.

A backend that keeps special tokens as text may pass the model's end-of-turn token through
(``Hello.<|im_end|>``, ``…<|eot_id|>``, Gemma 4's stray ``<channel|>``). A format declares the
tokens its templates end a turn with (``end_tokens``); ``TrailingTokens`` sits in front of a
program's input and drops a *run* of them — one or more tokens, whitespace after each — when it
is the last text of the output. The same text anywhere else is passed on as written.

While the output may still end in such a run, its tail is held back: the tail is the longest one
(within ``limit`` characters of the end) that is the beginning of a run. At the end of the
output a complete run is dropped and anything else is released. The held tail depends on the
text only, never on how it was split, so streaming and non-streaming agree; it is at most
``limit`` characters, so the work per chunk is bounded.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable

_WS = "[ \t\r\n]*"


@functools.lru_cache(maxsize=256)
def _patterns(tokens: frozenset[str]) -> tuple[re.Pattern[str], re.Pattern[str], re.Pattern[str], int]:
    """A complete run, the beginning of a run, the first characters of the tokens, and the longest
    token's length — built once per token set (a parser is built per answer; formats have few sets)."""
    unique = sorted(tokens, key=lambda t: (-len(t), t))
    if not unique:
        raise ValueError("TrailingTokens needs at least one token")
    alternatives = "|".join(re.escape(t) for t in unique)
    prefixes = sorted({t[:k] for t in unique for k in range(1, len(t))}, key=lambda p: (-len(p), p))
    partial = "|".join(re.escape(p) for p in prefixes)
    #: a complete run: tokens, whitespace after each
    run = re.compile(f"(?:(?:{alternatives}){_WS})+")
    #: the beginning of a run: complete tokens, then perhaps the beginning of one more
    beginning = re.compile(f"(?:(?:{alternatives}){_WS})*(?:{partial})?" if partial
                           else f"(?:(?:{alternatives}){_WS})*")
    first = re.compile("[" + re.escape("".join(sorted({t[0] for t in unique}))) + "]")
    return run, beginning, first, len(unique[0])


class TrailingTokens:
    """Filters one output's text (see the module docstring): ``feed`` returns what may be
    released now, ``finish`` what is left once the output has ended."""

    __slots__ = ("_first", "_held", "_limit", "_partial", "_run")

    def __init__(self, tokens: Iterable[str], limit: int = 0) -> None:
        self._run, self._partial, self._first, longest = _patterns(frozenset(t for t in tokens if t))
        self._limit = max(limit, 64, 3 * longest + 8)
        self._held = ""

    def feed(self, text: str) -> str:
        """The text that can no longer be part of a closing run."""
        held = self._held
        if not held:
            if self._first.search(text) is None:  # the common case: nothing here can begin a token
                return text
            buf = text
        else:
            buf = held + text
        start = len(buf) - self._limit
        found = self._first.search(buf, max(0, start))
        while found is not None:
            at = found.start()
            if self._partial.fullmatch(buf, at) is not None:
                self._held = buf[at:]
                return buf[:at]
            found = self._first.search(buf, at + 1)
        self._held = ""
        return buf

    def finish(self) -> str:
        """End of output: the held tail unless it is a complete run (then it is dropped)."""
        held, self._held = self._held, ""
        if held and self._run.fullmatch(held) is not None:
            return ""
        return held
