"""Client text is data: which spans of a rendered prompt came from a client and spell a control token.

A model's tokenizer turns some strings into control tokens (``<|im_start|>``, ``<|eot_id|>``,
``[INST]`` …) wherever they occur in a prompt's text — client text included. ``ControlText`` knows
those strings (as far as the tokenizer was readable: ``app.vocab``) and, around one render, traces
where client text holding them lands in the prompt, without changing the prompt:

* **The scan** (every request; linear): every string a client sent that reaches the template —
  message text, names, call ids, call arguments, reasoning handed back, extra message fields, tool
  definitions (keys included), ``chat_template_kwargs`` — and the text an answer continues
  (``prefill``), searched for a control string. Also flagged: a client string that begins with the
  end of a control string or ends with its beginning (it could form one with the text beside it), and
  a client's own use of the placeholder characters below. Almost every request has none: it is
  rendered exactly as before, same objects, same prompt (``plan.prompt`` is today's render).
* **Hide, render, restore** (only for flagged requests). Each flagged piece is replaced by a
  *placeholder* — private-use characters (``U+F0000`` …) that no template alters and no client can
  forge (a client's own characters of that block are hidden the same way) — deterministic per
  content, so the render cache still hits. After the render each placeholder is put back and its
  place recorded as a *span*: ``plan.prompt`` is byte-identical to the render without placeholders,
  plus a list of spans the tokenizer must read as plain text. An edge piece that formed no control
  string with its neighbours is dropped from the spans (it is ordinary text).
* **When the trace cannot be trusted** — a template cut a placeholder (a slice, a reverse, a JSON
  ``\\u`` escape), or reads a control string in client text itself (Qwen3 splits assistant content on
  ``</think>``), checked by rendering again without placeholders — the request falls back to
  ``escape``.

Modes (``--control-text``; ``app.pipeline.literal`` decides which is in force for a backend):

* ``tokens``: spans are sent as plain-text tokens (``app.pipeline.literal``); strings the backend
  cannot be sent as text (``unsplittable``: llama.cpp matches its user-defined tokens even in plain
  tokenization) are escaped instead;
* ``escape``: a zero-width space (U+200B) goes after the first character of every client control
  string (and of every run of the same string already holding such spaces there, so the model can
  read the client's exact text back: remove one U+200B after the first character of anything that
  reads as a control string);
* ``reject``: a 400 naming the field and the token;
* ``allow``: nothing is done (the behaviour before this module).

Limits, stated: only strings the tokenizer turns into tokens of their own are protected — markup a
template writes as plain text (a Hermes ``<tool_call>`` on a model without that token) is not a
token and cannot be kept from the model's eyes this way; a template that changes client text in
ways other than those above (its case, say) is rendered as it renders it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Container, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Literal

import orjson
from jinja2 import nodes

from app.conversation import Call, Turn
from app.templates.chat_template import TemplateError

Mode = Literal["tokens", "escape", "reject", "allow"]
#: ``[start, end)`` of a piece of prompt text that must be read as plain text
Span = tuple[int, int]

#: what ``escape`` inserts after the first character of a client's control string
ZW = "\u200b"

_BASE = 0xF0000  # Supplementary Private Use Area-A: our 32 code points
OPEN, CLOSE = chr(_BASE), chr(_BASE + 1)
_DIGIT0 = _BASE + 0x10
_RESERVED_CLASS = f"[{OPEN}-{chr(_BASE + 0x1F)}]"
_PLACEHOLDER = re.compile(f"{OPEN}([{chr(_DIGIT0)}-{chr(_DIGIT0 + 15)}]+){CLOSE}")
_RESERVED = re.compile(_RESERVED_CLASS)
_TO_DIGITS = str.maketrans({c: chr(_DIGIT0 + int(c, 16)) for c in "0123456789abcdef"})
_FROM_DIGITS = str.maketrans({chr(_DIGIT0 + i): "0123456789abcdef"[i] for i in range(16)})
_PIECE = 64  # longest edge piece looked for (a pattern nests once per character of it)
_SPACE = 64  # whitespace around an edge piece looked past (templates strip client text)
_FIELD = 10  # bits per slice bound in a placeholder's code (control strings up to 1023 characters)
#: control strings shorter than this are left alone (a one-character "token" would flag every text)
MIN_LENGTH = 2
#: control strings longer than this are left alone (no tokenizer has one; it bounds the patterns)
MAX_LENGTH = 256


class ControlTextRejected(ValueError):
    """``reject``: client text holds a control string (``where`` names the field, ``token`` the string)."""

    def __init__(self, where: str, token: str) -> None:
        super().__init__(f"{where} holds the control token {token!r}, which this server does not accept in client "
                         "text (--control-text reject)")
        self.where, self.token = where, token


@dataclass(frozen=True)
class Rendered:
    """A render, traced: the prompt (today's render, or with ``escape`` applied), the answer's
    prefill after it, the spans of ``prompt + prefill`` that must be read as plain text, whether
    client text was escaped, and whether every client string was plain (``clean``: nothing to
    escape or trace — each turn may be passed as ``settled`` when it comes again)."""

    prompt: str
    prefill: str = ""
    spans: tuple[Span, ...] = ()
    escaped: bool = False
    clean: bool = False


#: renders a conversation: (turns, tools, client template kwargs) → prompt
Render = Callable[[Sequence[Turn], list[dict[str, Any]] | None, dict[str, Any]], str]


@dataclass(frozen=True)
class ControlText:
    """The control strings of one model and what happens to client text holding one (see the module
    docstring). Picklable (it reaches the worker processes that render)."""

    strings: tuple[str, ...] = ()
    mode: Mode = "tokens"
    #: strings the backend cannot be sent as plain text (escaped even in ``tokens`` mode)
    unsplittable: frozenset[str] = frozenset()
    #: strings the template reads in client text (a condition, a split): traced only if a second
    #: render without placeholders agrees
    inspected: frozenset[str] = frozenset()
    #: where the strings came from, and why this mode (for the start-up line)
    why: str = ""
    _index: dict[str, int] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        kept = sorted({s for s in self.strings if MIN_LENGTH <= len(s) <= MAX_LENGTH},
                      key=lambda s: (-len(s), s))
        object.__setattr__(self, "strings", tuple(kept))
        object.__setattr__(self, "_index", {s: i for i, s in enumerate(kept)})

    @property
    def active(self) -> bool:
        return bool(self.strings) and self.mode != "allow"

    def escaping(self) -> ControlText:
        """This, in ``escape`` mode (made once): for a prompt that cannot be sent as tokens — one with
        images (``app.pipeline.plan``)."""
        twin: ControlText | None = self.__dict__.get("_escaping")
        if twin is None:
            twin = ControlText(self.strings, "escape", self.unsplittable, self.inspected, self.why)
            object.__setattr__(self, "_escaping", twin)
        return twin

    def __reduce__(self) -> tuple[Any, ...]:
        return ControlText, (self.strings, self.mode, self.unsplittable, self.inspected, self.why)

    # ------------------------------------------------------------------------ matching tables

    @property
    def _tables(self) -> _Tables:
        tables: _Tables | None = self.__dict__.get("_built")
        if tables is None:
            tables = _Tables(self.strings)
            object.__setattr__(self, "_built", tables)
        return tables

    def occurrences(self, text: str, start: int = 0, end: int | None = None) -> Iterator[Span]:
        """Where ``text[start:end]`` holds a control string (leftmost, longest; not overlapping)."""
        pattern = self._tables.tokens
        for m in pattern.finditer(text, start, len(text) if end is None else end):
            yield m.span()

    # ------------------------------------------------------------------------ the render

    def render(self, render: Render, turns: Sequence[Turn], tools: list[dict[str, Any]] | None,
               client_kwargs: dict[str, Any], prefill: str = "", own: Iterable[str] = (),
               settled: Container[int] = ()) -> Rendered:
        """``render(turns, tools, client_kwargs)`` followed by ``prefill``, traced (see the module
        docstring); ``ControlTextRejected`` in ``reject`` mode. ``prefill`` is the start of the
        model's own answer: the strings in ``own`` (the markers the model writes — a reasoning block's
        opening) are its own there, and stay control text; every other control string in it is
        protected as anywhere else. ``settled``: the indices of turns known to hold only plain
        strings — the same turns were in a ``clean`` render before (an agent's earlier turns, kept
        by ``app.prefix``): they are neither scanned nor rewritten, which leaves the result as it
        would be, since a plain string is never changed and never traced."""
        if not self.active:
            return Rendered(render(turns, tools, client_kwargs), prefill)
        tables = self._tables
        own = frozenset(own) & frozenset(self.strings) if prefill else frozenset()
        escaped = False
        if self.mode == "escape" and tables.escapes_any(turns, tools, client_kwargs, prefill, settled):
            # the client's control strings escaped where they stand
            escape = tables.escape
            e_turns, e_tools, e_kwargs = tables.rewrite(turns, tools, client_kwargs, escape, settled)
            e_prefill = tables.escape(prefill, own)
            escaped = e_prefill is not prefill or e_kwargs is not client_kwargs or e_tools is not tools \
                or any(a is not b for a, b in zip(e_turns, turns, strict=True))
            turns, tools, client_kwargs, prefill = e_turns, e_tools, e_kwargs, e_prefill
        hit = tables.first(turns, tools, client_kwargs, _without(prefill, own), settled)
        if hit is None:
            return Rendered(render(turns, tools, client_kwargs), prefill, escaped=escaped, clean=not escaped)
        where, token = hit
        if self.mode == "reject" and token:
            raise ControlTextRejected(where, token)
        hidden_turns, hidden_tools, hidden_kwargs = tables.rewrite(turns, tools, client_kwargs, tables.hide, settled)
        restored = _restore(render(hidden_turns, hidden_tools, hidden_kwargs), tables)
        if restored is not None and tables.inspects(self.inspected, turns, tools, client_kwargs) \
                and restored[0] != _or_none(render, turns, tools, client_kwargs):
            restored = None  # the template read the client's control text: not traceable
        if restored is None:
            if self.mode == "reject":
                raise ControlTextRejected(where, token or "(a control token)")
            return self._escaped_render(render, turns, tools, client_kwargs, prefill, own)
        prompt = restored[0]
        text, pieces = _with_prefill(*restored, prefill, tables, own)
        spans = tuple(span for span, edge in pieces if not edge or self._forms_token(text, span))
        if not spans:
            return Rendered(prompt, prefill, escaped=escaped)
        if self.mode == "reject":
            raise ControlTextRejected("client text", _covering(text, spans[0], tables) or text[slice(*spans[0])])
        keep = () if self.mode == "escape" else tuple(s for s in spans if not self._needs_escape(text, s, tables))
        if len(keep) < len(spans):
            return _escape_some(prompt, prefill, spans, keep)
        return Rendered(prompt, prefill, keep, escaped=escaped)

    def _escaped_render(self, render: Render, turns: Sequence[Turn], tools: list[dict[str, Any]] | None,
                        client_kwargs: dict[str, Any], prefill: str, own: frozenset[str]) -> Rendered:
        """The fallback: client control strings escaped in the client text itself, rendered."""
        tables = self._tables
        escape = tables.escape
        e_turns, e_tools, e_kwargs = tables.rewrite(turns, tools, client_kwargs, escape)
        return Rendered(render(e_turns, e_tools, e_kwargs), tables.escape(prefill, own), escaped=True)

    def _forms_token(self, text: str, span: Span) -> bool:
        """Whether an edge piece at ``span`` is part of a control string in ``text``."""
        a, b = span
        reach = self._tables.longest
        return any(s < b and a < e for s, e in self.occurrences(text, max(0, a - reach), min(len(text), b + reach)))

    def _needs_escape(self, text: str, span: Span, tables: _Tables) -> bool:
        if not self.unsplittable:
            return False
        a, b = span
        reach = tables.longest
        return any(text[s:e] in self.unsplittable for s, e in self.occurrences(text, max(0, a - reach),
                                                                               min(len(text), b + reach))
                   if s < b and a < e)

    def escape(self, text: str) -> str:
        """``text`` with ``escape`` applied (every control string, and its escaped forms, one U+200B more)."""
        return self._tables.escape(text) if self.strings else text


def _or_none(render: Render, turns: Sequence[Turn], tools: list[dict[str, Any]] | None,
             client_kwargs: dict[str, Any]) -> str | None:
    """The render, or ``None`` when the template refuses it."""
    try:
        return render(turns, tools, client_kwargs)
    except TemplateError:
        return None


def _covering(text: str, span: Span, tables: _Tables) -> str | None:
    a, b = span
    for m in tables.tokens.finditer(text, max(0, a - tables.longest), min(len(text), b + tables.longest)):
        if m.start() < b and a < m.end():
            return m.group()
    return None


# ------------------------------------------------------------------------------ placeholders


def _placeholder(code: int) -> str:
    return OPEN + format(code, "x").translate(_TO_DIGITS) + CLOSE


def _piece_code(index: int, start: int, end: int) -> int:
    return ((index << _FIELD | start) << _FIELD | end) << 1


def _char_code(char: str) -> int:
    return (ord(char) - _BASE) << 1 | 1


def _restore(raw: str, tables: _Tables) -> tuple[str, list[tuple[Span, bool]]] | None:
    """The render with every placeholder put back, and where each control piece went (``True``: an
    edge piece); ``None`` when a placeholder was cut or mangled."""
    out: list[str] = []
    spans: list[tuple[Span, bool]] = []
    at = size = 0
    strings = tables.strings
    mask = (1 << _FIELD) - 1
    for m in _PLACEHOLDER.finditer(raw):
        before = raw[at:m.start()]
        if _RESERVED.search(before):
            return None
        out.append(before)
        size += len(before)
        code = int(m.group(1).translate(_FROM_DIGITS), 16)
        if code & 1:
            piece = chr(_BASE + (code >> 1))
            if not OPEN <= piece <= chr(_BASE + 0x1F):
                return None
            out.append(piece)
            size += 1
        else:
            code >>= 1
            end, start, index = code & mask, code >> _FIELD & mask, code >> 2 * _FIELD
            if index >= len(strings) or not 0 <= start < end <= len(strings[index]):
                return None
            piece = strings[index][start:end]
            out.append(piece)
            spans.append(((size, size + len(piece)), (start, end) != (0, len(strings[index]))))
            size += len(piece)
        at = m.end()
    rest = raw[at:]
    if _RESERVED.search(rest) or "\\udb80\\udc0" in raw:  # a stray piece, or one a template JSON-escaped
        return None
    out.append(rest)
    return "".join(out), spans


def _without(text: str, own: frozenset[str]) -> str:
    """``text`` with the strings of ``own`` taken out (for the scan: they are allowed there)."""
    for s in own:
        if s in text:
            text = text.replace(s, "\x00")
    return text


def _with_prefill(text: str, spans: list[tuple[Span, bool]], prefill: str,
                  tables: _Tables, own: frozenset[str] = frozenset()) -> tuple[str, list[tuple[Span, bool]]]:
    """The prompt followed by the answer's prefill (client text outside the template): its control
    strings, and a control string across the join, are spans too."""
    if not prefill:
        return text, spans
    join = len(text)
    full = text + prefill
    spans = list(spans)
    for m in tables.tokens.finditer(full, max(0, join - tables.longest)):
        s, e = m.span()
        if e > join and not (s >= join and m.group() in own):
            spans.append(((max(s, join), e), False))
    return full, spans


def _escape_spans(text: str, spans: Iterable[Span]) -> str:
    """``text`` with one U+200B after the first character of each span."""
    out: list[str] = []
    at = 0
    for a, _b in sorted(spans):
        out.append(text[at:a + 1])
        out.append(ZW)
        at = a + 1
    out.append(text[at:])
    return "".join(out)


def _escape_some(prompt: str, prefill: str, spans: tuple[Span, ...], keep: tuple[Span, ...]) -> Rendered:
    """The spans of ``prompt + prefill`` not in ``keep`` escaped (``_escape_spans``; none crosses
    the join), and ``keep`` moved to match."""
    kept = set(keep)
    join = len(prompt)
    escaped = sorted(s for s in spans if s not in kept)
    prompt = _escape_spans(prompt, [s for s in escaped if s[0] < join])
    prefill = _escape_spans(prefill, [(a - join, b - join) for a, b in escaped if a >= join])

    def moved(at: int) -> int:
        return at + sum(1 for a, _b in escaped if a < at)

    return Rendered(prompt, prefill, tuple((moved(a), moved(a) + b - a) for a, b in keep), escaped=True)


# ------------------------------------------------------------------------------ the tables


class _Tables:
    """The matching machinery for one set of control strings, built on first use."""

    def __init__(self, strings: tuple[str, ...]) -> None:
        self.strings = strings
        self.index = {s: i for i, s in enumerate(strings)}
        self.longest = max(map(len, strings), default=0)
        alternation = _trie(strings, whole=True)
        self.tokens = re.compile(alternation)
        #: a control string, or one of the placeholder block's characters
        self.dirty = re.compile(f"{alternation}|{_RESERVED_CLASS}")
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
        self.begins = _small_pattern(_trie(s[:-1][:_PIECE] for s in strings) + r"\Z")
        self.ends_reversed = _small_pattern(_trie(s[:0:-1][:_PIECE] for s in strings) + r"\Z")
        #: the strings as they appear JSON-encoded (in tool definitions' JSON text)
        encoded = {orjson.dumps(s).decode()[1:-1] for s in strings}
        self.tools_tokens = re.compile(_trie(encoded | set(strings), whole=True))
        #: no control string holds a character JSON escapes: each stands verbatim in JSON text, and a
        #: JSON text without ``escapable`` holds no string ``escape`` would change
        self.json_verbatim = encoded == set(strings)
        #: JSON escapes in call arguments that could spell a control string's characters when decoded
        self.escapes = ("\\u", "\\/", *(e for e, c in (('\\"', '"'), ("\\\\", "\\")) if any(c in s for s in strings)))

    # ---- the scan

    def flags(self, text: str) -> str | None:
        """``""`` or the control string when ``text`` must be traced (``""``: only an edge piece or
        a placeholder character), ``None`` when it is plain."""
        m = self.tokens.search(text)
        if m is not None:
            return m.group()
        if not text.isascii() and _RESERVED.search(text):
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

    def any(self, turns: Sequence[Turn], tools: list[dict[str, Any]] | None, kwargs: Mapping[str, Any],
            prefill: str, settled: Container[int] = ()) -> bool:
        """Whether any client string must be traced (``first`` says which): the strings joined once and
        searched by the regular expression engine, the ends of each looked at; tool definitions as
        their JSON text (a control string there is written as is, or JSON-escaped)."""
        texts = _texts(_unsettled(turns, settled), self.escapes)
        texts += (t for value in kwargs.values() for t in _strings(value))
        texts += kwargs.keys()
        if prefill:
            texts.append(prefill)
        joined = "\x00".join(texts)
        if self.tokens.search(joined) is not None or (not joined.isascii() and _RESERVED.search(joined)):
            return True
        if tools:
            try:
                encoded = orjson.dumps(tools).decode()
            except (TypeError, orjson.JSONEncodeError):
                return any(self.flags(t) is not None for tool in tools for t in _strings(tool))
            if self.tools_tokens.search(encoded) is not None or (not encoded.isascii() and _RESERVED.search(encoded)):
                return True
        return any(map(self._edge, texts))

    def escapes_any(self, turns: Sequence[Turn], tools: list[dict[str, Any]] | None, kwargs: Mapping[str, Any],
                    prefill: str, settled: Container[int] = ()) -> bool:
        """Whether ``escape`` could change a client string (``rewrite`` with it, or the prefill): a
        superset, read off the strings joined in one search and the tools' JSON text in another
        (``_escape_leaves``), so that the usual request, with nothing to escape, is not walked value
        by value (40k instructions of a 2.3M request with two tools, ``bench.stack --instructions``)."""
        texts = _texts(_unsettled(turns, settled), self.escapes)
        texts += (t for value in kwargs.values() for t in _strings(value))
        texts += kwargs.keys()
        if prefill:
            texts.append(prefill)
        if self.escapable.search("\x00".join(texts)) is not None:
            return True
        return bool(tools) and not self._escape_leaves(tools)

    def first(self, turns: Sequence[Turn], tools: list[dict[str, Any]] | None, kwargs: Mapping[str, Any],
              prefill: str, settled: Container[int] = ()) -> tuple[str, str] | None:
        """The first client field to trace: (where, the control string or ``""``), or ``None``
        (turns in ``settled`` are plain: not looked at)."""
        if not self.any(turns, tools, kwargs, prefill, settled):
            return None
        found: tuple[str, str] | None = None
        for where, text in _client_strings(turns, tools, kwargs, prefill, settled):
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
            return _placeholder(_piece_code(index[piece], 0, len(piece)) if piece in index else _char_code(piece))

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
            hidden = hidden[:tail] + _placeholder(_piece_code(self.prefixes[piece], 0, len(piece))) + hidden[end:]
        if head is not None:
            piece = hidden[start:head]
            i = self.suffixes[piece]
            whole = len(self.strings[i])
            hidden = hidden[:start] + _placeholder(_piece_code(i, whole - len(piece), whole)) + hidden[head:]
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
        new_turns = [turn if i in settled else _turn_with(turn, fn, key) for i, turn in enumerate(turns)]
        if tools is not None and fn == self.escape and self._escape_leaves(tools):
            return new_turns, tools, _mapped(kwargs, fn, key)
        new_tools = None if tools is None else [_mapped(tool, fn, key) for tool in tools]
        if new_tools is not None and tools is not None and all(a is b for a, b in zip(new_tools, tools, strict=True)):
            new_tools = tools  # unchanged: the same list (``escaped`` compares it by identity)
        return new_turns, new_tools, _mapped(kwargs, fn, key)

    def _escape_leaves(self, value: Any) -> bool:
        """Whether ``escape`` leaves every string in ``value`` (keys too) as it is, read off its JSON
        text in one search — an agent's dozen tool schemas, the same every turn, are not walked."""
        if not self.json_verbatim:
            return False
        try:
            text = orjson.dumps(value).decode()
        except (TypeError, orjson.JSONEncodeError):
            return False
        return self.escapable.search(text) is None

    def inspects(self, inspected: frozenset[str], turns: Sequence[Turn], tools: list[dict[str, Any]] | None,
                 kwargs: Mapping[str, Any]) -> bool:
        """Whether client text holds a string the template reads in it."""
        if not inspected:
            return False
        texts = [t for turn in turns for _n, t in _turn_strings(turn)]
        texts += [t for tool in tools or () for t in _strings(tool)]
        texts += [t for value in kwargs.values() for t in _strings(value)]
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


def _tool_name(tool: Mapping[str, Any]) -> str:
    function = tool.get("function")
    name = function.get("name") if isinstance(function, Mapping) else tool.get("name")
    return str(name)


# ------------------------------------------------------------------------------ client values


def _client_strings(turns: Sequence[Turn], tools: list[dict[str, Any]] | None, kwargs: Mapping[str, Any],
                    prefill: str, settled: Container[int] = ()) -> Iterator[tuple[Callable[[], str], str]]:
    """Every client string that reaches the template, with a function naming where it is (but those
    of the turns in ``settled``)."""
    for i, turn in enumerate(turns):
        if i in settled:
            continue
        for name, text in _turn_strings(turn):
            yield partial("message {} ({}) {}".format, i, turn.role, name), text
    for i, tool in enumerate(tools or ()):
        for text in _strings(tool):
            yield partial("tool {} ({!r}) definition".format, i, _tool_name(tool)), text
    for key, value in kwargs.items():
        for text in (key, *_strings(value)):
            yield partial("chat_template_kwargs.{}".format, key), text
    if prefill:
        yield partial(str, "the final assistant message (continued)"), prefill


def _unsettled(turns: Sequence[Turn], settled: Container[int]) -> Sequence[Turn]:
    """``turns`` but those in ``settled`` (by index)."""
    return [turn for i, turn in enumerate(turns) if i not in settled] if settled else turns


def _texts(turns: Sequence[Turn], escapes: tuple[str, ...]) -> list[str]:
    """Every client string in ``turns`` (arguments JSON-decoded too where an escape in them could
    spell a control string's characters), in one tight loop."""
    out: list[str] = []
    add = out.append
    for turn in turns:
        if turn.text:
            add(turn.text)
        for part in turn.parts:  # a turn with images: its text pieces reach the template one by one
            if isinstance(part, str) and part:
                add(part)
        if turn.reasoning:
            add(turn.reasoning)
        if turn.name:
            add(turn.name)
        if turn.tool_call_id:
            add(turn.tool_call_id)
        for call in turn.calls:
            add(call.id)
            add(call.name)
            arguments = call.arguments
            if isinstance(arguments, str):
                add(arguments)
                if "\\" in arguments and any(e in arguments for e in escapes):
                    out.extend(_strings(_decoded(arguments)))
            else:
                out.extend(_strings(arguments))
        if turn.extra:
            out.extend(_strings(turn.extra))
    return out


def _turn_strings(turn: Turn) -> Iterator[tuple[str, str]]:
    """(field, text) of every client string a turn holds."""
    if turn.text:
        yield "content", turn.text
    for part in turn.parts:
        if isinstance(part, str) and part:
            yield "content", part
    if turn.name:
        yield "name", turn.name
    if turn.tool_call_id:
        yield "tool_call_id", turn.tool_call_id
    if turn.reasoning:
        yield "reasoning", turn.reasoning
    for k, call in enumerate(turn.calls):
        yield f"tool call {k} id", call.id
        yield f"tool call {k} name", call.name
        for text in _arguments_strings(call.arguments):
            yield f"tool call {k} arguments", text
    for key, value in turn.extra.items():
        for text in (key, *_strings(value)):
            yield key, text


def _arguments_strings(arguments: str | Mapping[str, Any]) -> Iterable[str]:
    """Arguments as the template sees them: JSON text whose escapes (``\\u003c``) would be decoded
    by the render is read decoded too."""
    if not isinstance(arguments, str):
        return _strings(arguments)
    if "\\" not in arguments:
        return (arguments,)
    return (arguments, *_strings(_decoded(arguments)))


def _decoded(arguments: str) -> Any:
    import json

    try:
        return json.loads(arguments)
    except (ValueError, RecursionError):
        return None


def _strings(value: Any) -> Iterator[str]:
    """Every string inside a JSON-like value, mapping keys included."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if item:
                yield item
        elif isinstance(item, Mapping):
            for k, v in item.items():
                if isinstance(k, str) and k:
                    yield k
                stack.append(v)
        elif isinstance(item, (list, tuple)):
            stack.extend(item)


def _mapped(value: Any, fn: Callable[[str], str], key: Callable[[str], str]) -> Any:
    """``value`` with ``fn`` applied to every string in it (``key`` to mapping keys); containers are
    copied only where something changed."""
    if isinstance(value, str):
        return fn(value)
    if isinstance(value, Mapping):
        changed = False
        out: dict[Any, Any] = {}
        for k, v in value.items():
            nk = key(k) if isinstance(k, str) else k
            nv = _mapped(v, fn, key)
            changed = changed or nk is not k or nv is not v
            out[nk] = nv
        if not changed:
            return value
        kind: Any = type(value)
        return kind(out) if kind is not dict and _rebuildable(value) else out
    if isinstance(value, (list, tuple)):
        items = [_mapped(v, fn, key) for v in value]
        if all(a is b for a, b in zip(items, value, strict=True)):
            return value
        return type(value)(items) if type(value) in (list, tuple) else items
    return value


def _rebuildable(value: Any) -> bool:
    try:
        type(value)({})
    except Exception:  # noqa: BLE001 - a mapping type that cannot be built from a dict: a plain dict then
        return False
    return True


def _turn_with(turn: Turn, fn: Callable[[str], str], key: Callable[[str], str]) -> Turn:
    text = fn(turn.text) if turn.text else turn.text
    name = fn(turn.name) if turn.name else turn.name
    call_id = fn(turn.tool_call_id) if turn.tool_call_id else turn.tool_call_id
    reasoning = fn(turn.reasoning) if turn.reasoning else turn.reasoning
    calls = tuple(_call_with(call, fn, key) for call in turn.calls)
    extra = _mapped(turn.extra, fn, key)
    parts = tuple(fn(p) if isinstance(p, str) and p else p for p in turn.parts)
    if (text is turn.text and name is turn.name and call_id is turn.tool_call_id and reasoning is turn.reasoning
            and extra is turn.extra and all(a is b for a, b in zip(calls, turn.calls, strict=True))
            and all(a is b for a, b in zip(parts, turn.parts, strict=True))):
        return turn
    return Turn(turn.role, text, calls, reasoning, call_id, name, extra, parts)


def _call_with(call: Call, fn: Callable[[str], str], key: Callable[[str], str]) -> Call:
    call_id, name = fn(call.id), fn(call.name)
    arguments: str | Mapping[str, Any] = call.arguments
    if isinstance(arguments, str):
        if "\\" in arguments and _decoded(arguments) is not None and isinstance(_decoded(arguments), dict):
            decoded = _decoded(arguments)
            mapped = _mapped(decoded, fn, key)
            arguments = mapped if mapped is not decoded else arguments
        else:
            arguments = fn(arguments)
    else:
        arguments = _mapped(arguments, fn, key)
    if call_id is call.id and name is call.name and arguments is call.arguments:
        return call
    return Call(call_id, name, arguments)


# ------------------------------------------------------------------------------ templates


def inspected_strings(source: str, strings: Iterable[str], environment: Any) -> frozenset[str]:
    """The control strings a template reads in its inputs: a string constant in a test, a comparison,
    a call's arguments or a filter's (``'</think>' in content``, ``content.split('</think>')``)
    holding one, or held by one."""
    try:
        ast = environment.parse(source)
    except Exception:  # noqa: BLE001 - a template that does not parse reads nothing
        return frozenset()
    consts: set[str] = set()
    for node in ast.find_all((nodes.Compare, nodes.Test, nodes.Call, nodes.Filter)):
        for child in node.iter_child_nodes():
            if isinstance(child, nodes.Operand):
                child = child.expr
            if isinstance(child, nodes.Const) and isinstance(child.value, str) and len(child.value) >= 2:
                consts.add(child.value)
    return frozenset(s for s in strings if any(s in c or c in s for c in consts))
