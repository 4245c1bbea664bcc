"""The matching tables of one model's control strings, and the client values rewritten with them.

``Tables(strings)`` (strings longest first, as ``ControlText`` keeps them) compiles once: ``tokens``
finds a control string (leftmost, longest) in time linear in the text, whatever their number;
``flags`` / ``any`` / ``first`` / ``escapes_any`` scan client strings (``app.templates.client_values``)
— a control string, an edge piece that could form one with the text beside it, or a placeholder
character; ``hide`` / ``escape`` / ``rewrite`` rewrite them (placeholders: ``app.templates.placeholders``;
``escape`` inserts ``ZW``), leaving what they do not change the same object.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Container, Iterable, Mapping, Sequence
from typing import Any

import orjson

from app.conversation import Turn
from app.templates import client_values
from app.templates.placeholders import RESERVED_CLASS, char_code, holds_reserved, piece_code, placeholder

#: what ``escape`` inserts after the first character of a client's control string
ZW = "\u200b"
_PIECE = 64  # longest edge piece looked for (a pattern nests once per character of it)
_SPACE = 64  # whitespace around an edge piece looked past (templates strip client text)
#: the client strings a render's scans read, and them joined with NUL (``Tables.scanned``)
Scanned = tuple[list[str], str]
_ENDS = 4096  # control strings' ends (each a word of a pattern) searched for in texts joined, at most


class Tables:
    """The matching machinery for one set of control strings, built on first use."""

    def __init__(self, strings: tuple[str, ...]) -> None:
        self.strings = strings
        self.index = {s: i for i, s in enumerate(strings)}
        self.longest = max(map(len, strings), default=0)
        alternation = _trie(strings, whole=True)
        self.tokens = re.compile(alternation)
        #: a control string, or one of the placeholder block's characters
        self.dirty = re.compile(f"{alternation}|{RESERVED_CLASS}")
        #: a control string with any run of U+200B after its first character (escape's target)
        self.escapable = re.compile(_trie(strings, whole=True, gap=f"{ZW}*"))
        self.prefixes: dict[str, int] = {}
        self.suffixes: dict[str, int] = {}
        for i, s in enumerate(strings):
            for k in range(1, len(s)):
                self.prefixes.setdefault(s[:k], i)
                self.suffixes.setdefault(s[k:], i)
        self.starts = frozenset(s[0] for s in strings)
        self.ends = frozenset(s[-1] for s in strings)
        #: a text ending with the beginning of a control string; a reversed text ending with the end of one
        beginnings = _trie(s[:-1][:_PIECE] for s in strings)
        self.begins = _small_pattern(beginnings + r"\Z")
        self.ends_reversed = _small_pattern(_trie(s[:0:-1][:_PIECE] for s in strings) + r"\Z")
        #: the same in texts joined with NUL (``_edges``), whitespace beside the piece: a text ending
        #: with a beginning; a text after a NUL, or the first, beginning with an end (every end a word
        #: of its own: ``None`` past ``_ENDS`` of them, as for a vocabulary of thousands)
        ends = {s[k:] for s in strings for k in range(max(1, len(s) - _PIECE), len(s))}
        endings = _trie(ends, whole=True) if len(ends) <= _ENDS else None
        self.joined_begins = _small_pattern(f"(?:{beginnings})\\s*(?:\\x00|\\Z)")
        self.joined_ends = _small_pattern(f"\\x00\\s*(?:{endings})") if endings is not None else None
        self.first_ends = _small_pattern(f"\\s*(?:{endings})") if endings is not None else None
        #: the strings as they appear JSON-encoded (in tool definitions' JSON text)
        encoded = {orjson.dumps(s).decode()[1:-1] for s in strings}
        self.tools_tokens = re.compile(_trie(encoded | set(strings), whole=True))
        #: no control string holds a character JSON escapes: each stands verbatim in JSON text, and a
        #: JSON text without ``escapable`` holds no string ``escape`` would change
        self.json_verbatim = encoded == set(strings)
        #: JSON escapes in call arguments that could spell a control string's characters when decoded
        self.escapes = ("\\u", "\\/", *(e for e, c in (('\\"', '"'), ("\\\\", "\\")) if any(c in s for s in strings)))
        #: the last list of tools read (``_tools_read``): its objects, its JSON text (``None``: not
        #: JSON) and the answers read off it so far (held: an agent's tools are the same objects turn
        #: after turn, ``app.prefix``)
        self._tools_seen: tuple[tuple[Any, ...], str | None, dict[str, bool]] = ((), "[]", {})

    # ---- the scan

    def flags(self, text: str) -> str | None:
        """``""`` or the control string when ``text`` must be traced (``""``: only an edge piece or
        a placeholder character), ``None`` when it is plain."""
        m = self.tokens.search(text)
        if m is not None:
            return m.group()
        if holds_reserved(text):
            return ""
        return "" if self._edge(text) else None

    def _edge(self, text: str) -> bool:
        """Whether ``text`` ends with the beginning of a control string or begins with the end of one
        (whitespace around it aside). Looks only at the ends: a few short slices, whatever the length."""
        reach = self.longest - 1
        begins, ends = self.begins, self.ends_reversed
        if begins is not None:
            if begins.search(text[-reach - _SPACE:].rstrip()[-reach:]) is not None:
                return True
        elif self._tail(text) is not None:
            return True
        if ends is not None:
            return ends.search(text[:reach + _SPACE].lstrip()[:reach][::-1]) is not None
        return self._head(text) is not None

    def _tail(self, text: str) -> int | None:
        """Where ``text``'s longest tail that begins a control string starts (after trailing space)."""
        end = len(text) - (len(window := text[-_SPACE:]) - len(window.rstrip()))
        low = max(0, end - self.longest + 1)
        best: int | None = None
        for c in self.starts:
            p = text.rfind(c, low, end)
            while p != -1:
                if text[p:end] in self.prefixes and (best is None or p < best):
                    best = p
                p = text.rfind(c, low, p)
        return best

    def _head(self, text: str) -> int | None:
        """Where ``text``'s longest head that ends a control string ends (after leading space)."""
        start = len(window := text[:_SPACE]) - len(window.lstrip())
        high = min(len(text), start + self.longest - 1)
        best: int | None = None
        for c in self.ends:
            p = text.find(c, start, high)
            while p != -1:
                if text[start:p + 1] in self.suffixes and (best is None or p + 1 > best):
                    best = p + 1
                p = text.find(c, p + 1, high)
        return best

    def scanned(self, turns: Sequence[Turn], kwargs: Mapping[str, Any], prefill: str,
                settled: Container[int] = ()) -> Scanned:
        """The client strings the scans read (turns in ``settled`` aside; tool definitions are read
        as their JSON text apart), and them joined with NUL: gathered once for a render's scans
        (``escapes_any``, then ``first`` when nothing was escaped)."""
        texts = client_values.texts(client_values.unsettled(turns, settled), self.escapes)
        texts += (t for value in kwargs.values() for t in client_values.strings(value))
        texts += kwargs.keys()
        if prefill:
            texts.append(prefill)
        return texts, "\x00".join(texts)

    def any(self, turns: Sequence[Turn], tools: list[dict[str, Any]] | None, kwargs: Mapping[str, Any],
            prefill: str, settled: Container[int] = (), scanned: Scanned | None = None,
            escapable_absent: bool = False) -> bool:
        """Whether any client string must be traced (``first`` says which): the strings joined once and
        searched by the regular expression engine, the ends of each looked at; tool definitions as
        their JSON text (a control string there is written as is, or JSON-escaped). ``scanned``: the
        strings as ``scanned`` gave them for these arguments, where the caller has them;
        ``escapable_absent``: the caller found no ``escapable`` match in their joined text (nothing to
        escape), so none of ``tokens`` either — not searched for again."""
        texts, joined = scanned if scanned is not None else self.scanned(turns, kwargs, prefill, settled)
        if (not escapable_absent and self.tokens.search(joined) is not None) or holds_reserved(joined):
            return True
        if tools:
            plain = self._tools_read(tools, "plain")
            if plain is None:  # not JSON: string by string
                return any(self.flags(t) is not None for tool in tools for t in client_values.strings(tool))
            if not plain:
                return True
        return self._edges(texts, joined)

    def _edges(self, texts: list[str], joined: str) -> bool:
        """Whether one of ``texts`` (``joined`` with NUL) has an edge piece (``_edge``): the first
        text's start matched, then two searches of the joined text, not text by text (0.17 against
        0.40 ms for the bench's agent at 300 turns) — a superset: a NUL inside a client's text, or
        more than ``_SPACE`` whitespace characters beside a piece, may be taken for an edge
        (``first`` then reads text by text, and finds what ``_edge`` finds)."""
        begins, ends, first = self.joined_begins, self.joined_ends, self.first_ends
        if begins is None or ends is None or first is None:  # patterns too large: text by text
            return any(map(self._edge, texts))
        return bool(texts) and (first.match(texts[0]) is not None or begins.search(joined) is not None
                                or ends.search(joined) is not None)

    def escapes_any(self, turns: Sequence[Turn], tools: list[dict[str, Any]] | None, kwargs: Mapping[str, Any],
                    prefill: str, settled: Container[int] = (), scanned: Scanned | None = None) -> bool:
        """Whether ``escape`` could change a client string (``rewrite`` with it, or the prefill): a
        superset, read off the strings joined in one search and the tools' JSON text in another
        (``_escape_leaves``), so that the usual request, with nothing to escape, is not walked value
        by value (40k instructions of a 2.3M request with two tools, ``bench.stack --instructions``).
        ``scanned``: as for ``any``."""
        _, joined = scanned if scanned is not None else self.scanned(turns, kwargs, prefill, settled)
        if self.escapable.search(joined) is not None:
            return True
        return tools is not None and len(tools) > 0 and not self._escape_leaves(tools)

    def first(self, turns: Sequence[Turn], tools: list[dict[str, Any]] | None, kwargs: Mapping[str, Any],
              prefill: str, settled: Container[int] = (), scanned: Scanned | None = None,
              escapable_absent: bool = False) -> tuple[str, str] | None:
        """The first client field to trace: (where, the control string or ``""``), or ``None``
        (turns in ``settled`` are plain: not looked at). ``scanned``, ``escapable_absent``: as for ``any``."""
        if not self.any(turns, tools, kwargs, prefill, settled, scanned, escapable_absent):
            return None
        found: tuple[str, str] | None = None
        for where, text in client_values.client_strings(turns, tools, kwargs, prefill, settled):
            flag = self.flags(text)
            if flag is not None:
                if flag:
                    return where(), flag
                found = found or (where(), flag)
        return found

    # ---- rewriting client values

    def hide(self, text: str, edges: bool = True) -> str:
        """``text`` with its control strings, its edge pieces (``edges``) and its placeholder-block
        characters as placeholders (the same text always gives the same result)."""
        if (self.flags(text) if edges else self.dirty.search(text)) is None:
            return text
        index = self.index

        def one(m: re.Match[str]) -> str:
            piece = m.group()
            return placeholder(piece_code(index[piece], 0, len(piece)) if piece in index else char_code(piece))

        hidden = self.dirty.sub(one, text)
        if not edges:
            return hidden
        head, tail = self._head(hidden), self._tail(hidden)
        start = len(hidden) - len(hidden.lstrip()) if hidden[:1].isspace() else 0
        end = len(hidden.rstrip()) if hidden[-1:].isspace() else len(hidden)
        if head is not None and tail is not None and tail < head:
            tail = None  # overlapping pieces: the head is enough to trace
        if tail is not None:
            piece = hidden[tail:end]
            hidden = hidden[:tail] + placeholder(piece_code(self.prefixes[piece], 0, len(piece))) + hidden[end:]
        if head is not None:
            piece = hidden[start:head]
            i = self.suffixes[piece]
            whole = len(self.strings[i])
            hidden = hidden[:start] + placeholder(piece_code(i, whole - len(piece), whole)) + hidden[head:]
        return hidden

    def hide_key(self, text: str) -> str:
        """A mapping key hidden: its control strings and placeholder-block characters only — a key is
        structure too (``"function"``, ``"type"``), looked up by the template, never cut into pieces."""
        return self.hide(text, edges=False)

    def escape(self, text: str, own: frozenset[str] = frozenset()) -> str:
        """``text`` with one U+200B more after the first character of every control string in it
        (those of ``own`` written as they are left alone)."""
        if not text or self.escapable.search(text) is None:
            return text
        return self.escapable.sub(lambda m: m.group() if m.group() in own else m.group()[0] + ZW + m.group()[1:], text)

    def rewrite(self, turns: Sequence[Turn], tools: list[dict[str, Any]] | None, kwargs: dict[str, Any],
                fn: Callable[[str], str], settled: Container[int] = ()
                ) -> tuple[list[Turn], list[dict[str, Any]] | None, dict[str, Any]]:
        """The client values with ``fn`` applied to every string (``hide_key`` to mapping keys when
        ``fn`` is ``hide``); what ``fn`` leaves alone stays the same object (a turn without control
        text is the same ``Turn``, and so is a turn in ``settled``, known to hold none)."""
        key = self.hide_key if fn == self.hide else fn
        new_turns = [turn if i in settled else client_values.turn_with(turn, fn, key) for i, turn in enumerate(turns)]
        if tools is not None and fn == self.escape and self._escape_leaves(tools):
            return new_turns, tools, client_values.mapped(kwargs, fn, key)
        new_tools = None if tools is None else [client_values.mapped(tool, fn, key) for tool in tools]
        if new_tools is not None and tools is not None and all(a is b for a, b in zip(new_tools, tools, strict=True)):
            new_tools = tools  # unchanged: the same list (``escaped`` compares it by identity)
        return new_turns, new_tools, client_values.mapped(kwargs, fn, key)

    def _escape_leaves(self, tools: list[dict[str, Any]]) -> bool:
        """Whether ``escape`` leaves every string in ``tools`` (keys too) as it is, read off their
        JSON text in one search — an agent's dozen tool schemas, the same every turn, are not walked."""
        return self.json_verbatim and self._tools_read(tools, "leaves") is True

    def _tools_read(self, tools: list[dict[str, Any]], question: str) -> bool | None:
        """``question`` answered of the tools' JSON text — ``"leaves"``: ``escape`` changes none of
        their strings; ``"plain"``: it holds no control string (as is or JSON-escaped) and no
        placeholder character — or ``None``: they do not encode as JSON. One encoding and one search
        per question for the same objects as the last time (what these read never changes in place):
        the escape mode's two questions, and an agent's next turn, share them."""
        objects, text, answers = self._tools_seen
        if len(objects) != len(tools) or not all(map(operator.is_, objects, tools)):
            try:
                text = orjson.dumps(tools).decode()
            except (TypeError, orjson.JSONEncodeError):
                text = None
            answers = {}
            self._tools_seen = (tuple(tools), text, answers)
        if text is None:
            return None
        answer = answers.get(question)
        if answer is None:
            answer = answers[question] = (self.escapable.search(text) is None if question == "leaves" else
                                          self.tools_tokens.search(text) is None and not holds_reserved(text))
        return answer

    def inspects(self, inspected: frozenset[str], turns: Sequence[Turn], tools: list[dict[str, Any]] | None,
                 kwargs: Mapping[str, Any]) -> bool:
        """Whether client text holds a string the template reads in it."""
        if not inspected:
            return False
        texts = [t for turn in turns for _n, t in client_values.turn_strings(turn)]
        texts += [t for tool in tools or () for t in client_values.strings(tool)]
        texts += [t for value in kwargs.values() for t in client_values.strings(value)]
        return any(s in t for t in texts for s in inspected)


def _small_pattern(pattern: str) -> re.Pattern[str] | None:
    """``pattern`` compiled, unless it is too large to be worth it (a vocabulary of thousands of
    control strings that share few endings): the caller then looks up pieces in a table instead."""
    return re.compile(pattern) if len(pattern) <= 32_768 else None


def _trie(words: Iterable[str], whole: bool = False, gap: str = "") -> str:
    """A pattern matching any of ``words`` (``whole``; the longest where several match at one place)
    or any non-empty beginning of one, built on their trie: a match costs the length of what it
    reads, however many words there are (an alternation of words costs their number at every
    place). ``gap`` (a pattern) may come after a word's first character."""
    end = ""  # the key marking the end of a word in a node (no character is empty)
    root: dict[str, Any] = {}
    for word in words:
        node = root
        for char in word:
            node = node.setdefault(char, {})
        node[end] = {}

    def branch(node: dict[str, Any], first: bool) -> str:
        arms = []
        for char, child in sorted((c, n) for c, n in node.items() if c != end):
            run = re.escape(char) + (gap if first else "")
            while whole and len(child) == 1 and end not in child:  # a chain without a branch: one literal run
                (char, child), = child.items()
                run += re.escape(char)
            rest = branch(child, False) if len(child) > (end in child) else ""
            if rest:
                rest = f"(?:{rest})?" if end in child or not whole else rest
            arms.append(run + rest)
        return arms[0] if len(arms) == 1 else "(?:" + "|".join(arms) + ")"

    return branch(root, True) if root else "(?!)"
