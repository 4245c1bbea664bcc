"""Markup-aware string differences: common prefixes and suffixes that never cut a tag in two.

Two renders that differ right after ``<`` (``<think>`` vs ``</think>``, ``<|START_TEXT|>`` vs
``<|START_ACTION|>``) share a character-level prefix that ends inside a tag; the helpers here
back off to the tag's start, so every boundary they report sits between pieces of markup.
"""

from __future__ import annotations

import re

OPENERS, CLOSERS = "<[", ">]"
_WINDOW = 64  # tags are short: look this far back (or ahead) for an unfinished one


def _raw_prefix(a: str, b: str) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def _raw_suffix(a: str, b: str) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[-1 - i] == b[-1 - i]:
        i += 1
    return i


def prefix_len(a: str, b: str) -> int:
    """Length of the common prefix of ``a`` and ``b``, backed off so it does not end inside a tag."""
    n = _raw_prefix(a, b)
    if n == len(a) == len(b):
        return n
    window = a[max(0, n - _WINDOW):n]
    for i in range(len(window) - 1, -1, -1):
        ch = window[i]
        if ch in CLOSERS:
            break
        if ch in OPENERS:
            return n - (len(window) - i)
    return n


def suffix_len(a: str, b: str) -> int:
    """Length of the common suffix, advanced so it does not begin inside a tag."""
    n = _raw_suffix(a, b)
    if n == len(a) == len(b):
        return n
    window = a[len(a) - n:len(a) - n + _WINDOW]
    for i, ch in enumerate(window):
        if ch in OPENERS:
            break
        if ch in CLOSERS:
            return n - (i + 1)
    return n


def common_prefix(a: str, b: str) -> str:
    return a[:prefix_len(a, b)]


def common_suffix(a: str, b: str) -> str:
    n = suffix_len(a, b)
    return a[len(a) - n:] if n else ""


def balanced(text: str) -> bool:
    """Whether every ``<`` / ``[`` in ``text`` is closed in it (and nothing closes unopened)."""
    for opener, closer in zip(OPENERS, CLOSERS, strict=True):
        depth = 0
        for ch in text:
            if ch == opener:
                depth += 1
            elif ch == closer:
                depth -= 1
                if depth < 0:
                    return False
        if depth:
            return False
    return True


def split_between(between: str, tail_max: int, head_min: int) -> tuple[int, int]:
    """Split ``between`` = ``tail + sep + head``, where ``tail`` is at most ``tail_max`` long (the
    closing markup of one item) and ``head`` starts no earlier than ``head_min`` (the opening
    markup of the next). Cut points are chosen where the markup is balanced. Returns ``(i, j)``:
    ``tail = between[:i]``, ``sep = between[i:j]``, ``head = between[j:]``."""
    n = len(between)
    tail_max = max(0, min(tail_max, n))
    head_min = max(0, min(head_min, n))
    if tail_max <= head_min:
        i = next((k for k in range(tail_max, -1, -1) if balanced(between[:k])), 0)
        j = next((k for k in range(head_min, n + 1) if balanced(between[i:k])), head_min)
        return i, max(i, j)
    # the closing and opening markup overlap: one cut, where the closing part is balanced
    for k in range(tail_max, head_min - 1, -1):
        if balanced(between[:k]):
            return k, k
    return head_min, head_min


_PIECE = re.compile(r"<[^<>\n]*>|\[[^\[\]\n]*\]|[^\s<\[]+|\S")


def _is_tag(text: str) -> bool:
    return len(text) > 1 and text[0] + text[-1] in ("<>", "[]")


def piece_spans(text: str) -> list[tuple[int, int]]:
    """Where the ``pieces`` of ``text`` are."""
    out: list[tuple[int, int]] = []
    prev_tag = False
    for match in _PIECE.finditer(text):
        tag = _is_tag(match.group())
        if out and match.start() == out[-1][1] and not (prev_tag and tag):
            out[-1] = (out[-1][0], match.end())
        else:
            out.append((match.start(), match.end()))
        prev_tag = tag
    return out


def pieces(text: str) -> list[str]:
    """Markup pieces: runs of text without whitespace, split between two adjacent tags
    (``<|END_THINKING|><|START_TEXT|>`` → two pieces; ``<|close|>think<|sep|>`` and
    ``to=self<|message|>`` stay whole); a tag may hold spaces (``[BEGIN FINAL RESPONSE]``)."""
    return [text[a:b] for a, b in piece_spans(text)]


def is_markup(piece: str) -> bool:
    """A piece that looks like markup rather than a word (holds a tag character)."""
    return any(c in piece for c in "<>[]|｜")
