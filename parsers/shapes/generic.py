"""Tool-call programs built from a *learned* call pattern (``auto``: see ``app/templates/autodetect``).

A chat template shows how a model writes calls; ``app/templates/autodetect`` renders it with sentinel
values and writes down what it saw as a ``GenericFormat``: literal markup and *slots*::

    <tool_call>                              Solar Open: literal, slot, literal …
    {"name": "f", "arguments": {…}}          <|tool_call:begin|>ID<|tool_call:name|>NAME<|tool_call:args|>{…}<|tool_call:end|>
    </tool_call>                             → ("<|tool_call:begin|>", Slot(ID), "<|tool_call:name|>", Slot(NAME),
    → ("<tool_call>\\n", Slot(CALL),             "<|tool_call:args|>", Slot(ARGS), "<|tool_call:end|>")
       "\\n</tool_call>")

Slots: ``NAME`` (the function name), ``ID`` (the call id), ``SKIP`` (text the template derives from
the call — an index, a repeated name — that is read and ignored), ``ARGS`` (a JSON arguments
object, streamed as written), ``CALL`` (a whole JSON call object, ``parsers.shapes.jsoncall``) and
``PARAMS`` (tagged parameters, ``Params``: converted to JSON incrementally, typed by the tool's
schema). Literal text is matched token by token (tokens are the whitespace-separated pieces of
the literal; whitespace between them is free), so ``"<tool_call>\\n"`` also accepts
``"<tool_call> "``. The first token of a call is its start marker.

Calls may sit in a ``section`` (``<tool_calls>`` … ``</tool_calls>``), whose text between calls is
markup; with ``json_list`` the section holds one JSON list of call objects. A ``separator``
between calls outside a section (``<|eom|><|start|>assistant``) is markup too: any of its pieces
right after a call is dropped.

The programs use the same primitives as every detector (linear time, split invariance): slot
text is read with ``read_until`` (bounded), JSON streams through ``json_value``, parameter values
stream as JSON-escaped text (strings) or are converted once their closing tag arrives.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Generator
from dataclasses import dataclass, field
from functools import partial

from parsers.core.args import ArgsObject, arg_type
from parsers.core.cursor import Cursor, discard
from parsers.core.driver import Out
from parsers.core.markers import MarkerSet
from parsers.format import CallContext, Read, ToolFormat
from parsers.shapes.jsoncall import JsonCallShape, json_args_object, json_call, json_call_list
from parsers.tools import ToolSpec
from parsers.wire import WireFormat

NAME, CALL_ID, SKIP, ARGS, CALL, PARAMS = "name", "id", "skip", "args", "call", "params"
SLOT_KINDS = (NAME, CALL_ID, SKIP, ARGS, CALL, PARAMS)
KEY = "{key}"  # in ``Params.value_end``: the parameter's own key (``</{key}>``)


@dataclass(frozen=True)
class Slot:
    kind: str

    def __post_init__(self) -> None:
        if self.kind not in SLOT_KINDS:
            raise ValueError(f"unknown slot kind {self.kind!r}")


Part = str | Slot


@dataclass(frozen=True)
class Params:
    """How one tagged parameter is written: ``key_start KEY key_end [attributes] value_start VALUE value_end``."""

    key_start: str  # "<arg_key>" | "<parameter=" | '<parameter name="'
    key_end: str  # "</arg_key>" | ">" | '">'
    value_end: str  # "</arg_value>" | "</parameter>" | "</{key}>"
    value_start: str = ""  # "<arg_value>"
    attributes_end: str = ""  # after key_end, attributes run up to this text (' string="true">')
    trim_newline: bool = False  # one newline after the value's opening and before its closing is markup

    @property
    def tokens(self) -> tuple[str, ...]:
        return tuple(t for t in (self.key_start, self.key_end, self.value_start, self.attributes_end,
                                 self.value_end.split(KEY)[0]) if t.strip())


@dataclass(frozen=True)
class GenericFormat:
    call: tuple[Part, ...]
    section: tuple[str, str] = ("", "")
    separator: str = ""
    json_list: bool = False
    shape: JsonCallShape = field(default_factory=JsonCallShape)
    params: Params | None = None

    def __post_init__(self) -> None:
        steps = _steps(self.call)
        slots = [s for s in steps if isinstance(s, Slot)]
        if self.json_list:
            if not tokens(self.section[0]) or [s.kind for s in slots] != [CALL]:
                raise ValueError("a JSON list needs a section opener and call objects")
        elif (not steps or not isinstance(steps[0], str)) and \
                not (tokens(self.section[0]) and [s.kind for s in slots] == [CALL] and len(steps) == 1):
            raise ValueError("a call must begin with literal markup (or be a JSON object inside a section)")
        if any(s.kind == PARAMS for s in slots) and self.params is None:
            raise ValueError("a PARAMS slot needs Params")
        for a, b in itertools.pairwise(steps):
            if isinstance(a, Slot) and isinstance(b, Slot) and a.kind in (NAME, CALL_ID, SKIP) \
                    and b.kind in (NAME, CALL_ID, SKIP):
                raise ValueError("two text slots need literal markup between them")

    @property
    def section_tokens(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """The section's opening and closing tokens (without a JSON list's own brackets)."""
        opening, closing = tokens(self.section[0]), tokens(self.section[1])
        if self.json_list:
            opening, closing = _drop_edge(opening, "[", last=True), _drop_edge(closing, "]", last=False)
        return opening, closing

    @property
    def markers(self) -> tuple[str, ...]:
        """Every literal token of the format."""
        found: list[str] = [*self.section_tokens[0], *self.section_tokens[1]]
        for part in (*self.call, self.separator):
            if isinstance(part, str):
                found += tokens(part)
        if self.params is not None:
            found += self.params.tokens
        return tuple(dict.fromkeys(t for t in found if t not in ("[", "]", ",", "{", "}")))

    @property
    def start_markers(self) -> tuple[str, ...]:
        first = list(self.section_tokens[0][:1])
        steps = _steps(self.call)
        if steps and isinstance(steps[0], str):
            first.append(steps[0])
        return tuple(dict.fromkeys(first))


_TAG_BOUNDARY = re.compile(r"(?<=>)(?=<)")


def tokens(text: str) -> tuple[str, ...]:
    """The pieces of a literal: whitespace-separated, and split between adjacent tags
    (``<|tool_call_end|><|tool_calls_section_end|>`` → two tokens, whitespace allowed between)."""
    return tuple(p for chunk in text.split() for p in _TAG_BOUNDARY.split(chunk) if p)


def _steps(parts: tuple[Part, ...]) -> list[str | Slot]:
    """The call pattern as a flat list of literal tokens and slots."""
    out: list[str | Slot] = []
    for part in parts:
        if isinstance(part, Slot):
            out.append(part)
        else:
            out += tokens(part)
    return out


class _Plan:
    """Precomputed marker sets for one format."""

    def __init__(self, fmt: GenericFormat) -> None:
        self.fmt = fmt
        self.steps = _steps(fmt.call)
        self.open, self.close = fmt.section_tokens
        self.call_start = self.steps[0] if self.steps and isinstance(self.steps[0], str) else None
        structural = [t for t in fmt.markers if len(t) >= 3]
        self.stop = MarkerSet(structural) if structural else None
        outer = [self.open[0]] if self.open else []
        if self.call_start is not None:
            outer.append(self.call_start)
        self.outer = MarkerSet(outer)
        inner = [m for m in (self.call_start, self.close[0] if self.close else None) if m]
        self.inner = MarkerSet(inner) if inner else None
        self.separator = tokens(fmt.separator)
        # the last slot: literal tokens after it close the call (and are tolerated missing at the end)
        last = max((i for i, s in enumerate(self.steps) if isinstance(s, Slot)), default=-1)
        self.trailing_from = last + 1
        self.follow = {i: self._follow(i) for i, s in enumerate(self.steps) if isinstance(s, Slot)}

    def _follow(self, i: int) -> MarkerSet:
        """What may come right after the text slot at ``i``: its terminators."""
        found: list[str] = []
        for step in self.steps[i + 1:]:
            if isinstance(step, str):
                found.append(step)
                break
            if step.kind == PARAMS:
                assert self.fmt.params is not None
                found.append(self.fmt.params.key_start.strip() or self.fmt.params.key_start)
                continue
            if step.kind in (ARGS, CALL):
                found.append("{")
                break
        return MarkerSet(found or ["\n"])


def _drop_edge(toks: tuple[str, ...], char: str, last: bool) -> tuple[str, ...]:
    """Remove the list bracket from the section's edge token (``<tool_calls>[`` → ``<tool_calls>``)."""
    if not toks:
        return toks
    items = list(toks)
    i = -1 if last else 0
    tok = items[i]
    tok = tok[:-1] if last and tok.endswith(char) else (tok[1:] if not last and tok.startswith(char) else tok)
    items[i] = tok
    return tuple(t for t in items if t)


def generic(fmt: GenericFormat, wire: WireFormat | None) -> ToolFormat:
    """The ``ToolFormat`` for a learned ``fmt`` (see the module docstring); ``wire`` is the learned
    call as the format writes it (``None`` where it could not be written down)."""
    return ToolFormat(read=generic_calls(fmt), start_markers=fmt.start_markers, markers=fmt.markers, wire=wire)


def generic_calls(fmt: GenericFormat) -> Read:
    """The program for ``fmt`` (see the module docstring)."""
    plan = _Plan(fmt)

    def read(ctx: CallContext, cur: Cursor, out: Out) -> Generator[None, None, None]:
        while True:
            marker = yield from cur.until(plan.outer, out.content.write)
            if marker is None:
                return
            if plan.open and marker == plan.open[0]:
                yield from _section(plan, ctx, cur, out, marker)
                continue
            out.calls.begin(marker)
            ok = yield from _call(plan, ctx, cur, out)
            if out.calls.end(ok) and plan.separator:  # markup between two calls (any of its pieces)
                while (yield from cur.match(plan.separator)) is not None:
                    pass

    return read


def _section(plan: _Plan, ctx: CallContext, cur: Cursor, out: Out, marker: str) -> Generator[None, None, None]:
    """After the section's first token: the rest of its opener, the calls, its closer."""
    fmt = plan.fmt
    out.calls.begin(marker)  # the opener is passed through if what follows is not a section after all
    for tok in plan.open[1:]:
        yield from cur.skip_ws()
        if not (yield from cur.expect(tok)):
            out.calls.end(False)
            return
    if fmt.json_list:
        if (yield from json_call_list(cur, out, fmt.shape, plan.stop)):
            yield from _closing(cur, plan.close)
            out.content.boundary()
        return
    out.calls.cancel()
    out.content.boundary()
    if plan.call_start is None:  # JSON call objects, one after another
        while True:
            yield from cur.skip_ws()
            if (yield from cur.peek()) != "{":
                break
            out.calls.begin()
            if not out.calls.end((yield from json_call(cur, out, fmt.shape, plan.stop))):
                return
        if plan.close:
            yield from _closing(cur, plan.close)
        out.content.boundary()
        return
    assert plan.inner is not None
    while True:
        inside = yield from cur.until(plan.inner, discard)
        if inside is None:
            return
        if plan.close and inside == plan.close[0]:
            yield from _closing(cur, plan.close[1:])
            out.content.boundary()
            return
        out.calls.begin(inside)
        if not out.calls.end((yield from _call(plan, ctx, cur, out))):
            return


def _closing(cur: Cursor, toks: tuple[str, ...]) -> Generator[None, None, bool]:
    for tok in toks:
        if not (yield from cur.closing(tok)):
            return False
    return True


def _call(plan: _Plan, ctx: CallContext, cur: Cursor, out: Out) -> Generator[None, None, bool]:  # noqa: C901 — the learned call shape: one branch per way a template writes a call
    """One call after its start token: the rest of the pattern."""
    fmt = plan.fmt
    name: str | None = None
    call_id: str | None = None
    header = False
    for i, step in enumerate(plan.steps[1:], start=1):
        if isinstance(step, str):
            if i >= plan.trailing_from:
                if not (yield from cur.closing(step)):
                    return False
                continue
            yield from cur.skip_ws()
            if not (yield from cur.expect(step)):
                return False
            continue
        kind = step.kind
        if kind in (NAME, CALL_ID, SKIP):
            follow = plan.follow[i]
            text, term = yield from cur.read_until(follow, limit=256)
            if term is None:
                return False
            cur.unread(len(term))
            text = text.strip()
            if kind == NAME:
                if not text:
                    return False
                name = text
            elif kind == CALL_ID:
                call_id = text or None
            continue
        if kind == CALL:
            if not (yield from json_call(cur, out, fmt.shape, plan.stop)):
                return False
            header = True
            continue
        if name is None:
            return False
        if not header:
            out.calls.header(name, call_id)
            header = True
        if kind == ARGS:
            if not (yield from json_args_object(cur, out, plan.stop)):
                return False
        else:
            assert fmt.params is not None
            after = next((s for s in plan.steps[i + 1:] if isinstance(s, str)), None)
            if not (yield from params(fmt.params, ctx.tools_by_name.get(name), cur, out, after)):
                return False
    if not header:
        if name is None:
            return False
        out.calls.header(name, call_id)
    return True


def params(p: Params, tool: ToolSpec | None, cur: Cursor, out: Out,
           after: str | None = None) -> Generator[None, None, bool]:
    """Tagged parameters up to (not including) ``after`` (the markup that follows the last one,
    which may begin like a key: ``<`` + key vs ``</invoke>``); written as one JSON object. Values
    are typed by the tool's schema (strings stream as they arrive)."""
    args = ArgsObject(out.calls)
    key_start = p.key_start.strip() or p.key_start
    key_end = MarkerSet((p.key_end,))
    attr_end = MarkerSet((p.attributes_end,)) if p.attributes_end else None
    choices = (key_start, after) if after else (key_start,)
    while True:
        yield from cur.skip_ws()
        if (yield from cur.match(choices, consume=False)) != key_start:
            break
        yield from cur.expect(key_start)
        key, term = yield from cur.read_until(key_end, limit=256)
        if term is None:
            return False
        if attr_end is not None:
            _, term = yield from cur.read_until(attr_end, limit=256)
            if term is None:
                return False
        if p.value_start:
            yield from cur.skip_ws()
            if not (yield from cur.expect(p.value_start.strip())):
                return False
        key = key.strip()
        if not key:
            return False
        typed = arg_type(tool.param_schema(key), tool.parameters) if tool is not None else arg_type(None)
        args.key(key)
        ends = MarkerSet((p.value_end.replace(KEY, key),))
        if not (yield from args.value(typed, p.trim_newline, typed.nullable, partial(cur.until, ends))):
            return False
    args.close()
    return True
