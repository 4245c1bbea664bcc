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

This module owns ``ControlText`` and the trace (render, restore, escape the spans). Its parts: the
matching tables that scan and rewrite client values (``app.templates.control_tables``), the walk over
every client string (``app.templates.client_values``), the placeholder code
(``app.templates.placeholders``).
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from jinja2 import nodes

from app.conversation import Turn
from app.templates.chat_template import TemplateError
from app.templates.control_tables import ZW, Tables
from app.templates.placeholders import BASE, CLOSE, FIELD, FROM_DIGITS, OPEN, PLACEHOLDER, holds_reserved

#: the public names (``ZW``, ``OPEN`` and ``CLOSE`` are defined where they are used and handed on here)
__all__ = ["CLOSE", "MAX_LENGTH", "MIN_LENGTH", "OPEN", "ZW", "ControlText", "ControlTextRejected", "Mode", "Render",
           "Rendered", "Span", "inspected_strings"]

Mode = Literal["tokens", "escape", "reject", "allow"]
#: ``[start, end)`` of a piece of prompt text that must be read as plain text
Span = tuple[int, int]

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
    def _tables(self) -> Tables:
        tables: Tables | None = self.__dict__.get("_built")
        if tables is None:
            tables = Tables(self.strings)
            object.__setattr__(self, "_built", tables)
        return tables

    def occurrences(self, text: str, start: int = 0, end: int | None = None) -> Iterator[Span]:
        """Where ``text[start:end]`` holds a control string (leftmost, longest; not overlapping)."""
        pattern = self._tables.tokens
        for m in pattern.finditer(text, start, len(text) if end is None else end):
            yield m.span()

    def regions(self, text: str, spans: Sequence[Span]) -> list[Span]:
        """The stretches of ``text`` to tokenize as plain text so that its client ``spans`` stay
        text: each span widened to the control strings around it that are not in a span (the
        template's own: the tokenizer splits there anyway), or to the text's ends; overlapping
        ones merged."""
        ordered = sorted(spans)
        own = [(s, e) for s, e in self.occurrences(text)
               if not any(a < e and s < b for a, b in ordered)]  # spans are few: a request has a handful
        out: list[Span] = []
        k = 0
        for a, b in ordered:
            while k < len(own) and own[k][1] <= a:
                k += 1
            start = own[k - 1][1] if k else 0
            j = k
            while j < len(own) and own[j][0] < b:
                j += 1
            end = own[j][0] if j < len(own) else len(text)
            if out and start <= out[-1][1]:
                out[-1] = (out[-1][0], max(end, out[-1][1]))
            else:
                out.append((start, end))
        return out

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
        scanned = tables.scanned(turns, client_kwargs, prefill, settled) if self.mode == "escape" else None
        if scanned is not None and tables.escapes_any(turns, tools, client_kwargs, prefill, settled, scanned):
            # the client's control strings escaped where they stand
            escape = tables.escape
            e_turns, e_tools, e_kwargs = tables.rewrite(turns, tools, client_kwargs, escape, settled)
            e_prefill = tables.escape(prefill, own)
            escaped = e_prefill is not prefill or e_kwargs is not client_kwargs or e_tools is not tools \
                or any(a is not b for a, b in zip(e_turns, turns, strict=True))
            turns, tools, client_kwargs, prefill = e_turns, e_tools, e_kwargs, e_prefill
            scanned = None  # (what was escaped is read again)
        traced = _without(prefill, own)
        reuse = scanned is not None and traced is prefill  # (read by ``escapes_any``: nothing escapable in it)
        hit = tables.first(turns, tools, client_kwargs, traced, settled, scanned if reuse else None, reuse)
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

    def _needs_escape(self, text: str, span: Span, tables: Tables) -> bool:
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


def _covering(text: str, span: Span, tables: Tables) -> str | None:
    a, b = span
    for m in tables.tokens.finditer(text, max(0, a - tables.longest), min(len(text), b + tables.longest)):
        if m.start() < b and a < m.end():
            return m.group()
    return None


# ------------------------------------------------------------------------------ placeholders


def _restore(raw: str, tables: Tables) -> tuple[str, list[tuple[Span, bool]]] | None:
    """The render with every placeholder put back, and where each control piece went (``True``: an
    edge piece); ``None`` when a placeholder was cut or mangled."""
    out: list[str] = []
    spans: list[tuple[Span, bool]] = []
    at = size = 0
    strings = tables.strings
    mask = (1 << FIELD) - 1
    for m in PLACEHOLDER.finditer(raw):
        before = raw[at:m.start()]
        if holds_reserved(before):
            return None
        out.append(before)
        size += len(before)
        code = int(m.group(1).translate(FROM_DIGITS), 16)
        if code & 1:
            piece = chr(BASE + (code >> 1))
            if not OPEN <= piece <= chr(BASE + 0x1F):
                return None
            out.append(piece)
            size += 1
        else:
            code >>= 1
            end, start, index = code & mask, code >> FIELD & mask, code >> 2 * FIELD
            if index >= len(strings) or not 0 <= start < end <= len(strings[index]):
                return None
            piece = strings[index][start:end]
            out.append(piece)
            spans.append(((size, size + len(piece)), (start, end) != (0, len(strings[index]))))
            size += len(piece)
        at = m.end()
    rest = raw[at:]
    if holds_reserved(rest) or "\\udb80\\udc0" in raw:  # a stray piece, or one a template JSON-escaped
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
                  tables: Tables, own: frozenset[str] = frozenset()) -> tuple[str, list[tuple[Span, bool]]]:
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
