"""Rendering the next turn of a conversation without rendering its earlier turns again — where the
template is proven to allow it.

A chat template renders a conversation in one loop over its messages (``{% for message in messages
%}``), with some work before it (the system header, tools) and after it (the generation prompt).
When an agent sends turn *t + 1*, its messages are turn *t*'s plus a few new ones; re-running the
loop body for every earlier message is most of the cost of a long conversation. This module skips
those iterations and splices in their text from the last render — only when that text is certain
to be what the iterations would write now.

**The proof (static, per template; ``plan_of``).** The main loop is a ``for`` over a name (the
*sequence*), at the top level (inside ``if``s at most, so it runs at most once per render), without
a filter, ``else`` or ``recursive``. Its body (and every macro it calls, transitively) must be
free of loop-carried state: no namespace attribute is assigned (``{% set ns.x = … %}``), no method
that changes a list, dict or set is called, no ``{% break %}``; it calls only macros of the
template (each defined once, at the top level, reading no name that is assigned anywhere but once,
at the top level, before the macro), the pure globals ``range``, ``dict``, ``namespace`` and
``raise_exception``, and methods that change nothing; no filter but the pure ones (not
``random``); no ``{% include %}``, ``{% import %}``, ``{% extends %}`` or ``{% block %}``
anywhere. It reads the sequence only as ``seq[loop.index0 ± k]``, ``seq[loop.index ± k]`` or
``seq[k]``, and the main loop's ``loop`` only as ``index0``, ``index``, ``first``, ``last``,
``previtem`` and ``nextitem`` (never ``length``, ``revindex``, ``changed`` or ``cycle``). Every
other name it reads — top-level variables, namespaces, ``tools``, ``chat_template_kwargs`` — is
*captured*: its value is taken when the loop starts. Since nothing in the loop can change outer
state, the text of iteration *i* is then a function of the captured values, *i*, and the items
from *i − k* to *i + ahead* (whether they exist included).

**The check (at run time, per render).** The template is compiled a second time with calls added
just before the loop (it receives the sequence and the captured values) and after it, and with
the loop running over the items from the first one not reused on (``seq[start:]``), its body
rewritten to read ``loop`` and the items around it as a loop over the whole sequence would
(``_FromStart``; a read that counts from the end — ``seq[loop.index0 - 1]`` in the first
iteration — makes the render one that is not kept). The first call serialises each item of the sequence exactly (``marshal``, else ``exact_bytes``: an item that
cannot be serialised exactly — a tuple, a ``str`` or ``dict`` subclass other than tool arguments, a
non-finite float — stops reuse), finds the longest earlier render whose items are, byte for byte
and item for item, a prefix of these (among those whose first items digest alike: a BLAKE2b
digest, salted per template), and requires its captured values to be byte-identical (the same exact
serialisation). Then iterations ``0 … n_old − 1 − ahead`` (all of them if the sequence is
unchanged) and any read ``seq[k]`` with ``k < n_old`` are known to write the same text; they are
skipped and their old text is put back in place. Everything before and after the loop runs as
usual. Each iteration's text is cut out of the output by a per-process random separator; if the
data itself holds the separator, the counts do not match and the template is rendered whole.

A template that fails the proof (many do: loops that set namespace flags, Kimi K2's list building)
is always rendered whole. What the cache holds (``RenderCache``): per earlier render, the text of
each loop iteration, the sequence's items and the captured values serialised —
bounded in bytes, least recently used dropped first, per process.
"""

from __future__ import annotations

import hashlib
import marshal
import math
import secrets
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import accumulate
from operator import is_
from typing import Any

import jinja2
import orjson
from jinja2 import nodes
from jinja2.utils import Namespace
from jinja2.visitor import NodeTransformer

from app.bucketed import BucketedLRU
from app.jsontext import JsonText
from app.templates.fastrender import render

#: separates the loop's iterations in a resumable render's raw output; random per process, so no
#: client can put it in a message on purpose (and by chance, a count mismatch catches it)
SEPARATOR = f"\x00tw-loop-{secrets.token_hex(12)}\x00"

_ENTER, _STATE, _LEAVE, _AT = "__tw_loop_enter", "__tw_loop", "__tw_loop_leave", "__tw_loop_at"
#: main-loop ``loop`` attributes a body may read, and how far ahead each looks
_LOOP_ATTRS = {"index0": 0, "index": 0, "first": 0, "previtem": 0, "last": 1, "nextitem": 1}
#: globals a body may call: pure, or raising (a raise is not cached: a failed render stores nothing)
_PURE_CALLS = frozenset({"range", "dict", "namespace", "raise_exception"})
_IMPURE_FILTERS = frozenset({"random"})
_FORBIDDEN = (nodes.Extends, nodes.Include, nodes.Import, nodes.FromImport, nodes.Block)
#: statement and expression nodes a loop body may hold (anything else fails the proof)
_ALLOWED = (nodes.Output, nodes.TemplateData, nodes.If, nodes.For, nodes.Assign, nodes.AssignBlock, nodes.Continue,
            nodes.Scope,
            nodes.Const, nodes.Name, nodes.Getattr, nodes.Getitem, nodes.Slice, nodes.Call, nodes.Filter, nodes.Test,
            nodes.CondExpr, nodes.And, nodes.Or, nodes.Not, nodes.Compare, nodes.Operand, nodes.BinExpr,
            nodes.UnaryExpr, nodes.Concat, nodes.List, nodes.Tuple, nodes.Dict, nodes.Pair, nodes.Keyword)
_MUTATORS: frozenset[str] = frozenset({
    "append", "extend", "insert", "pop", "remove", "clear", "sort", "reverse", "update", "setdefault", "popitem",
    "add", "discard", "difference_update", "intersection_update", "symmetric_difference_update", "appendleft",
    "extendleft", "popleft", "rotate"})


class NotProven(Exception):
    """The template's loop cannot be shown to allow reuse (the reason is the message)."""


@dataclass(frozen=True)
class LoopPlan:
    """A template proven resumable: the compiled resumable template and what its check needs."""

    template: jinja2.Template
    sequence: str  # the name the main loop iterates
    ahead: int  # items past its own an iteration reads (``loop.last``, ``seq[loop.index0 + 1]``)
    fixed: int  # 1 + the highest constant index read (``seq[0]``), 0 when none
    captured: tuple[str, ...]  # outer names the loop body reads
    salt: bytes = field(default_factory=lambda: secrets.token_bytes(16))  # keys of one template only


# ------------------------------------------------------------------------------ the proof


def plan_of(env: jinja2.Environment, source: str) -> LoopPlan:
    """The template's resumable form, or ``NotProven`` (see the module docstring)."""
    ast = env.parse(source)
    if any(True for _ in ast.find_all(_FORBIDDEN)):
        raise NotProven("the template includes, imports, extends or defines blocks")
    macros: dict[str, nodes.Macro] = {}
    for macro in ast.find_all(nodes.Macro):
        if macro.name in macros or not any(node is macro for node in ast.body):
            raise NotProven(f"macro {macro.name!r} is defined twice or below the top level")
        macros[macro.name] = macro
    bound = _assignments(ast)
    failure = NotProven("no top-level loop over the messages")
    for main, parent in _main_loops(ast):  # the first one proven (any is sound; the others run as they are)
        try:
            walk = _prove(main, macros, bound, ast, env)
        except NotProven as exc:
            failure = exc
            continue
        assert isinstance(main.iter, nodes.Name) and isinstance(main.target, nodes.Name)
        sequence = main.iter.name
        captured = tuple(sorted(walk.reads - {main.target.name, "loop", sequence} - walk.callables))
        template = _resumable(env, ast, main, parent, captured)
        return LoopPlan(template, sequence, walk.ahead, walk.fixed, captured)
    raise failure


def _prove(main: nodes.For, macros: dict[str, nodes.Macro], bound: dict[str, list[nodes.Node]],
           ast: nodes.Template, env: jinja2.Environment) -> _Body:
    if not isinstance(main.target, nodes.Name) or main.test is not None or main.recursive or main.else_:
        raise NotProven("the main loop has a filter, an else, a tuple target or recursion")
    assert isinstance(main.iter, nodes.Name)
    walk = _Body(main.iter.name, main.target.name, macros, bound, ast, env)
    for child in main.body:
        walk.statement(child, inner_loop=False)
    if walk.breaks:
        raise NotProven("the main loop breaks")
    return walk


def _main_loops(ast: nodes.Template) -> list[tuple[nodes.For, list[nodes.Node]]]:
    """Top-level loops over the conversation, the one writing the most output first: loops over
    ``messages``, then loops over a name assigned from an expression that reads ``messages``."""
    loops: list[tuple[nodes.For, list[nodes.Node]]] = []

    def visit(body: list[nodes.Node]) -> None:
        for node in body:
            if isinstance(node, nodes.For) and isinstance(node.iter, nodes.Name):
                loops.append((node, body))
            elif isinstance(node, nodes.If):
                visit(node.body)
                for branch in node.elif_:
                    visit(branch.body)
                visit(node.else_)

    visit(ast.body)
    derived = {a.target.name for a in ast.find_all(nodes.Assign) if isinstance(a.target, nodes.Name)
               and any(n.name == "messages" for n in a.node.find_all(nodes.Name))}

    def rank(entry: tuple[nodes.For, list[nodes.Node]]) -> tuple[int, int]:
        name = entry[0].iter.name  # type: ignore[attr-defined]
        return (0 if name == "messages" else 1, -sum(1 for _ in entry[0].find_all(nodes.Output)))

    return sorted((e for e in loops if e[0].iter.name == "messages" or e[0].iter.name in derived),  # type: ignore[attr-defined]
                  key=rank)


def _assignments(ast: nodes.Template) -> dict[str, list[nodes.Node]]:
    """Every node that binds each name, anywhere in the template."""
    bound: dict[str, list[nodes.Node]] = {}
    for node in ast.find_all((nodes.Assign, nodes.AssignBlock, nodes.For, nodes.Macro, nodes.With,
                              nodes.CallBlock)):
        targets: list[nodes.Node] = []
        if isinstance(node, (nodes.Assign, nodes.AssignBlock, nodes.For)):
            targets = [node.target]
        elif isinstance(node, nodes.Macro):
            bound.setdefault(node.name, []).append(node)
            targets = list(node.args)
        elif isinstance(node, nodes.With):
            targets = list(node.targets)
        for target in targets:
            for name in target.find_all(nodes.Name) if not isinstance(target, nodes.Name) else [target]:
                bound.setdefault(name.name, []).append(node)
    return bound


def _precedes(ast: nodes.Template, first: nodes.Node, second: nodes.Node) -> bool:
    order = {id(n): i for i, n in enumerate(ast.find_all(nodes.Node))}
    return order.get(id(first), -1) < order.get(id(second), -1)


class _Body:
    """Walks the main loop's body (and the macros it calls) and proves it free of loop-carried
    state, collecting the names it reads and how far it looks ahead."""

    def __init__(self, sequence: str, target: str, macros: dict[str, nodes.Macro],
                 bound: dict[str, list[nodes.Node]], ast: nodes.Template, env: jinja2.Environment) -> None:
        self.sequence, self.target, self.macros, self.bound, self.ast, self.env = (
            sequence, target, macros, bound, ast, env)
        self.reads: set[str] = set()
        self.callables: set[str] = set()  # macros and pure globals called (never captured)
        self.ahead = 0
        self.fixed = 0
        self.breaks = False
        self._checked_macros: set[str] = set()

    # statements
    def statement(self, node: nodes.Node, inner_loop: bool, in_macro: bool = False) -> None:  # noqa: C901 — the prefix-stability proof: one branch per Jinja statement node
        if isinstance(node, nodes.Break):
            if inner_loop:
                return
            self.breaks = True
            return
        if not isinstance(node, _ALLOWED):
            raise NotProven(f"{type(node).__name__} in the loop body")
        if isinstance(node, (nodes.Assign, nodes.AssignBlock)):
            if isinstance(node.target, nodes.NSRef) or any(True for _ in node.target.find_all(nodes.NSRef)):
                raise NotProven("the loop body assigns a namespace attribute")
            if any(n.name == self.sequence for n in _names(node.target)):
                raise NotProven("the loop body rebinds the sequence")
            if isinstance(node, nodes.Assign):
                self.expression(node.node, inner_loop, in_macro)
            else:
                if node.filter is not None:
                    self.expression(node.filter, inner_loop, in_macro)
                for child in node.body:
                    self.statement(child, inner_loop, in_macro)
            return
        if isinstance(node, nodes.For):
            self.expression(node.iter, inner_loop, in_macro)
            if node.test is not None and any(n.name == "loop" for n in node.test.find_all(nodes.Name)):
                raise NotProven("a nested loop's filter reads loop")
            if node.test is not None:
                self.expression(node.test, True, in_macro)
            for child in node.body:
                self.statement(child, True, in_macro)
            for child in node.else_:  # a for's else runs where ``loop`` is the enclosing loop's
                self.statement(child, inner_loop, in_macro)
            return
        if isinstance(node, nodes.If):
            self.expression(node.test, inner_loop, in_macro)
            for child in node.body:
                self.statement(child, inner_loop, in_macro)
            for branch in node.elif_:
                self.statement(branch, inner_loop, in_macro)
            for child in node.else_:
                self.statement(child, inner_loop, in_macro)
            return
        if isinstance(node, nodes.Scope):  # ``{% generation %}``: its body, in a scope of its own
            for child in node.body:
                self.statement(child, inner_loop, in_macro)
            return
        if isinstance(node, nodes.Output):
            for child in node.nodes:
                self.expression(child, inner_loop, in_macro)
            return
        # Continue, TemplateData: nothing to check

    # expressions
    def expression(self, node: nodes.Node, inner_loop: bool, in_macro: bool) -> None:  # noqa: C901 — the prefix-stability proof: one branch per Jinja expression node
        if not isinstance(node, _ALLOWED) or isinstance(node, (nodes.Output, nodes.If, nodes.For, nodes.Assign,
                                                               nodes.AssignBlock, nodes.Scope, nodes.Continue)):
            raise NotProven(f"{type(node).__name__} in the loop body")
        if isinstance(node, nodes.Name):
            if node.name == "loop" and not inner_loop:
                raise NotProven("the loop body reads loop other than index0/index/first/last/previtem/nextitem")
            if node.name == self.sequence and not in_macro:
                raise NotProven("the loop body reads the sequence other than by a fixed or relative index")
            if node.name == self.sequence or (node.name == "loop" and in_macro and not inner_loop):
                raise NotProven("a macro reads the sequence or the loop")
            if node.name in ("caller", "self", "varargs", "kwargs") and node.name not in self.bound:
                raise NotProven(f"the loop body reads {node.name}")
            self.reads.add(node.name)
            return
        if isinstance(node, nodes.Getattr) and isinstance(node.node, nodes.Name) and node.node.name == "loop" \
                and not inner_loop:
            if in_macro or node.attr not in _LOOP_ATTRS:
                raise NotProven(f"the loop body reads loop.{node.attr}")
            self.ahead = max(self.ahead, _LOOP_ATTRS[node.attr])
            return
        if isinstance(node, nodes.Getitem) and isinstance(node.node, nodes.Name) and node.node.name == self.sequence:
            if in_macro:
                raise NotProven("a macro reads the sequence")
            offset = _relative_index(node.arg, inner_loop)
            if offset is not None:
                self.ahead = max(self.ahead, offset)
                return
            if isinstance(node.arg, nodes.Const) and type(node.arg.value) is int and node.arg.value >= 0:
                self.fixed = max(self.fixed, node.arg.value + 1)
                return
            raise NotProven("the loop body indexes the sequence by something other than loop.index0 ± k or k")
        if isinstance(node, nodes.Call):
            self._call(node, inner_loop, in_macro)
        elif isinstance(node, nodes.Filter):
            if node.name in _IMPURE_FILTERS or node.name not in self.env.filters:
                raise NotProven(f"filter {node.name!r} in the loop body")
        elif isinstance(node, nodes.Test) and node.name not in self.env.tests:
            raise NotProven(f"test {node.name!r} in the loop body")
        for child in node.iter_child_nodes():
            self.expression(child, inner_loop, in_macro)

    def _call(self, node: nodes.Call, inner_loop: bool, in_macro: bool) -> None:
        callee = node.node
        if isinstance(callee, nodes.Name):
            if callee.name in self.macros:
                self.callables.add(callee.name)
                self._macro(self.macros[callee.name])
                return
            if callee.name in _PURE_CALLS and callee.name not in self.bound:
                self.callables.add(callee.name)
                return
            raise NotProven(f"the loop body calls {callee.name!r}")
        if isinstance(callee, nodes.Getattr):
            if callee.attr in _MUTATORS:
                raise NotProven(f"the loop body calls .{callee.attr}()")
            return
        raise NotProven("the loop body calls something other than a macro, a pure global or a method")

    def _macro(self, macro: nodes.Macro) -> None:
        if macro.name in self._checked_macros:
            return
        self._checked_macros.add(macro.name)
        outer, self.reads = self.reads, set()
        for default in macro.defaults:
            self.expression(default, False, True)
        for child in macro.body:
            self.statement(child, False, True)
        params = {arg.name for arg in macro.args} | {"varargs", "kwargs"}
        inside = {id(node) for node in macro.find_all(nodes.Node)}
        free = self.reads - params - set(self.macros) - self.callables
        for name in free:  # the value a macro sees must be the one captured when the loop starts
            binders = [b for b in self.bound.get(name, []) if id(b) not in inside and b is not macro]
            if not binders:
                continue
            if len(binders) == 1 and any(node is binders[0] for node in self.ast.body) \
                    and _precedes(self.ast, binders[0], macro):
                continue
            raise NotProven(f"macro {macro.name!r} reads {name!r}, which is assigned elsewhere")
        self.reads = outer | free


def _names(node: nodes.Node) -> list[nodes.Name]:
    return [node] if isinstance(node, nodes.Name) else list(node.find_all(nodes.Name))


def _relative_index(arg: nodes.Node, inner_loop: bool) -> int | None:
    """``k`` for ``loop.index0 + k`` (``loop.index`` counts one more; ``-`` gives a negative k)."""
    if inner_loop:
        return None

    def base(node: nodes.Node) -> int | None:
        if isinstance(node, nodes.Getattr) and isinstance(node.node, nodes.Name) and node.node.name == "loop":
            return {"index0": 0, "index": 1}.get(node.attr)
        return None

    direct = base(arg)
    if direct is not None:
        return direct
    if isinstance(arg, (nodes.Add, nodes.Sub)) and isinstance(arg.right, nodes.Const) \
            and type(arg.right.value) is int:
        start = base(arg.left)
        if start is not None:
            return start + (arg.right.value if isinstance(arg, nodes.Add) else -arg.right.value)
    return None


def _resumable(env: jinja2.Environment, ast: nodes.Template, main: nodes.For, parent: list[nodes.Node],
               captured: tuple[str, ...]) -> jinja2.Template:
    """The template with the calls added around and inside its main loop (``ast`` is changed)."""
    line = main.lineno

    def call(name: str, *args: nodes.Expr) -> nodes.Output:
        node = nodes.Output([nodes.Call(nodes.Name(name, "load"), list(args), [], None, None)])
        node.set_lineno(line)
        node.set_environment(env)
        return node

    assert isinstance(main.iter, nodes.Name)
    sequence = main.iter.name
    enter = call(_ENTER, nodes.Name(sequence, "load"),
                 nodes.List([nodes.Name(name, "load") for name in captured]))
    # the loop runs over the items from ``start`` on; the body reads ``loop`` as if from the first
    main.iter = nodes.Getitem(nodes.Name(sequence, "load"), nodes.Slice(_start(), None, None), "load")
    shift = _FromStart(sequence)
    main.body = [nodes.Output([nodes.Getattr(nodes.Name(_STATE, "load"), "mark", "load")]),
                 *(shift.visit(node) for node in main.body)]
    main.set_lineno(line)
    main.set_environment(env)
    at = next(i for i, node in enumerate(parent) if node is main)
    parent[at:at + 1] = [enter, main, call(_LEAVE)]
    return env.template_class.from_code(env, env.compile(ast), env.make_globals(None), None)


def _start() -> nodes.Expr:
    """``__tw_loop.start``: the first iteration that runs (a plain dict: ``{"start": …, "mark": SEPARATOR}``)."""
    return nodes.Getattr(nodes.Name(_STATE, "load"), "start", "load")


def _loop(attr: str) -> nodes.Expr:
    return nodes.Getattr(nodes.Name("loop", "load"), attr, "load")


class _FromStart(NodeTransformer):
    """The main loop's body, rewritten for a loop over ``seq[start:]``: every read of the main
    loop's ``loop`` (the proof allows ``index0``, ``index``, ``first``, ``last``, ``previtem`` and
    ``nextitem`` only) says what it says in a loop over the whole sequence. Nested loops' bodies
    and filters are left alone (there ``loop`` is theirs); their ``else`` is not."""

    def __init__(self, sequence: str) -> None:
        self.sequence = sequence

    def visit_For(self, node: nodes.For) -> nodes.Node:
        node.iter = self.visit(node.iter)
        node.else_ = [self.visit(child) for child in node.else_]
        return node

    def visit_Getitem(self, node: nodes.Getitem) -> nodes.Node:
        """``seq[i]`` → ``__tw_loop_at(seq, i)`` (the same item; a negative ``i`` — ``seq[loop.index0 - 1]``
        in the first iteration — reads from the end, and such a render is not kept)."""
        if not (isinstance(node.node, nodes.Name) and node.node.name == self.sequence):
            return self.generic_visit(node)
        if isinstance(node.arg, nodes.Const) and type(node.arg.value) is int and node.arg.value >= 0:
            return node
        return nodes.Call(nodes.Name(_AT, "load"), [node.node, self.visit(node.arg)], [], None, None)

    def visit_Getattr(self, node: nodes.Getattr) -> nodes.Node:
        if not (isinstance(node.node, nodes.Name) and node.node.name == "loop"):
            return self.generic_visit(node)
        if node.attr in ("index0", "index"):
            return nodes.Add(_loop(node.attr), _start())
        if node.attr == "first":
            return nodes.And(_loop("first"), nodes.Compare(_start(), [nodes.Operand("eq", nodes.Const(0))]))
        if node.attr == "previtem":
            later = nodes.And(_loop("first"), nodes.Compare(_start(), [nodes.Operand("gt", nodes.Const(0))]))
            before = nodes.Getitem(nodes.Name(self.sequence, "load"), nodes.Sub(_start(), nodes.Const(1)), "load")
            return nodes.CondExpr(later, before, _loop("previtem"))
        if node.attr in ("last", "nextitem"):  # the loop still ends where the sequence does
            return node
        raise NotProven(f"the loop body reads loop.{node.attr}")  # the proof refused it already


# --------------------------------------------------------------------------- the check


class _Inexact(ValueError):
    pass


def _exact_default(value: Any) -> Any:
    """orjson's hook for values it does not serialise itself (subclasses are passed through here)."""
    kind = type(value)
    if isinstance(value, jinja2.Undefined):
        return [SEPARATOR, "undefined"]
    if kind is Namespace:
        return [SEPARATOR, "namespace", object.__getattribute__(value, "_Namespace__attrs")]
    if kind.__name__ == "JsonArguments" and isinstance(value, dict):
        return [SEPARATOR, "arguments", dict(value)]
    raise TypeError(kind.__name__)


def _check_exact(value: Any) -> None:
    """Raise ``_Inexact`` where orjson would serialise two different values alike (a tuple as a
    list, a non-finite float as null, a ``str`` subclass as a ``str``)."""
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is str or kind is int or kind is bool or item is None:
            continue
        if kind is float:
            if not math.isfinite(item):
                raise _Inexact("non-finite float")
        elif kind is dict or kind.__name__ == "JsonArguments" and isinstance(item, dict):
            stack.extend(item.values())
        elif kind is list:
            stack.extend(item)
        elif kind is Namespace:
            stack.extend(object.__getattribute__(item, "_Namespace__attrs").values())
        elif not isinstance(item, jinja2.Undefined):
            raise _Inexact(kind.__name__)


def exact_bytes(value: Any) -> bytes:
    """``value`` serialised so that two values give the same bytes only if they render alike
    (``_Inexact`` where that cannot be promised)."""
    _check_exact(value)
    try:
        return orjson.dumps(value, default=_exact_default, option=orjson.OPT_PASSTHROUGH_SUBCLASS)
    except (TypeError, orjson.JSONEncodeError) as exc:
        raise _Inexact(str(exc)) from None


@dataclass(eq=False)
class Entry:
    """One earlier render: the text of each loop iteration, its sequence's items serialised exactly
    one after the other (``joined``; item ``i`` ends at ``ends[i]``) and the bucket they are filed
    under (``key``: the digest of the first items), the captured values, and (when the loop ran
    over the messages themselves) each message as prepared for the template. ``size`` is what it
    counts in the cache's byte bound."""

    texts: list[str]
    key: bytes
    joined: bytes
    ends: list[int]
    captured: bytes
    items: list[Any] | None
    size: int
    #: the texts' JSON encodings one after the other (``orjson``, without the quotes), text ``i``'s
    #: ending at ``texts_json_ends[i]``: a resumed prompt's encoding is made from them
    texts_json: bytes = b""
    texts_json_ends: list[int] = field(default_factory=list)
    #: the items ``joined`` serialises, when the caller promised never to change them (``frozen``):
    #: a later sequence holding these very objects first is known to start with ``joined``
    source: list[Any] | None = None


#: prefix checks one lookup makes at most (longest first); a mismatch costs up to the bytes shared
MAX_PROBES = 16
#: items the bucket key digests: conversations that share them share a bucket
KEY_ITEMS = 2


class RenderCache:
    """Earlier renders, filed by the digest of their first items (``KEY_ITEMS``); a lookup finds the
    longest one whose items are, byte for byte, a prefix of the sequence asked about. At most
    ``max_bytes`` (texts, messages, serialised items and captured values: the texts counted by
    ``sys.getsizeof``, a message by the length of its serialisation, three times), least recently
    used dropped first, per process. Thread-safe (renders may run off the event loop).
    Conversations of fewer than ``min_messages`` messages are rendered whole and not kept: resuming
    them would save less than its bookkeeping costs."""

    def __init__(self, max_bytes: int, min_messages: int = 0) -> None:
        self.max_bytes = max_bytes
        self.min_messages = min_messages
        self._filed: BucketedLRU[Entry] = BucketedLRU(lambda entry: len(entry.ends))
        self.hits = 0  # renders that reused at least one iteration
        self.reused = 0  # iterations reused, over all renders

    @property
    def bytes_held(self) -> int:
        return self._filed.bytes

    def longest(self, key: bytes, joined: bytes, ends: Sequence[int]) -> Entry | None:
        """The cached render whose items are the longest prefix of the sequence ``joined`` holds
        (item ``i`` ending at ``ends[i]``), among those filed under ``key``."""
        with self._filed.lock:
            probes = 0
            for entry in self._filed.bucket(key):
                n = len(entry.ends)
                if n > len(ends) or ends[n - 1] != entry.ends[-1]:
                    continue
                if joined.startswith(entry.joined) and entry.ends == ends[:n]:
                    self._filed.touch(entry)
                    return entry
                probes += 1
                if probes >= MAX_PROBES:
                    break
        return None

    def same_start(self, salt: bytes, items: Sequence[Any]) -> tuple[tuple[bytes, bytes, list[int]], Entry] | None:
        """``serialised(salt, items)`` and the longest cached render whose ``source`` items are
        ``items``' first ones, object for object — found without serialising those again (they
        were promised never to change); ``None`` when there is none (or ``items`` are not all
        marshallable: ask ``serialised``)."""
        try:
            first = _marshalled(items[:KEY_ITEMS])
        except ValueError:
            return None
        key = _digest(salt, b"m", first)
        with self._filed.lock:
            for entry in self._filed.bucket(key):
                source = entry.source
                if source is not None and len(source) <= len(items) and all(map(is_, source, items)):
                    self._filed.touch(entry)
                    break
            else:
                return None
        try:
            rest = _marshalled(items[len(source):])
        except ValueError:
            return None
        base = entry.ends[-1] if entry.ends else 0
        ends = [*entry.ends, *(base + end for end in accumulate(map(len, rest)))]
        return (key, b"".join((entry.joined, *rest)), ends), entry

    def put(self, entry: Entry) -> None:
        if not entry.ends or entry.size > self.max_bytes:
            return
        with self._filed.lock:
            for old in self._filed.bucket(entry.key):
                if old.joined == entry.joined and old.ends == entry.ends:
                    self._filed.drop(old)
                    break
            self._filed.add(entry, self.max_bytes)

    def filed(self) -> int:
        """Entries the lookup index holds (``len`` counts what the byte bound does: they agree)."""
        return sum(1 for _ in self._filed.filed())

    def __len__(self) -> int:
        return len(self._filed)


def _marshalled(items: Sequence[Any]) -> list[bytes]:
    """Each item serialised exactly by ``marshal`` (C speed, exact types, no shared references at
    version 2); ``ValueError`` when one is not marshallable."""
    dumps = marshal.dumps
    return [dumps(item, 2) for item in items]


def serialised(salt: bytes, items: Sequence[Any], exact: bool = False,
               parsed_json: bool = False) -> tuple[bytes, bytes, list[int]]:
    """The sequence's bucket key, its items serialised one after the other and where each ends —
    by ``marshal`` where every item allows it, else by ``exact_bytes`` (``exact``: always), the
    kinds told apart in the key (``_Inexact`` where neither is exact). ``parsed_json``: the items
    are what a JSON parser made (exact ``dict``, ``list``, ``str``, ``int``, ``float``, ``bool``,
    ``None``; no NaN), for which ``orjson`` is exact, and faster still."""
    datas: list[bytes] | None = None
    if parsed_json:
        dumps = orjson.dumps
        try:
            datas, tag = [dumps(item) for item in items], b"o"
        except orjson.JSONEncodeError:
            datas = None
    if datas is None and not exact:
        try:
            datas, tag = _marshalled(items), b"m"
        except ValueError:
            datas = None
    if datas is None:
        datas, tag = [exact_bytes(item) for item in items], b"j"
    return _digest(salt, tag, datas[:KEY_ITEMS]), b"".join(datas), list(accumulate(map(len, datas)))


def _digest(salt: bytes, tag: bytes, first: Sequence[bytes]) -> bytes:
    """The bucket key of a sequence whose first items (up to ``KEY_ITEMS``) serialise to ``first``
    by the kind ``tag`` names."""
    digest = hashlib.blake2b(salt, digest_size=16)
    digest.update(tag + len(first).to_bytes(1, "little"))
    for data in first:
        digest.update(data)
    return digest.digest()


class _Run:
    """One resumable render's state: what the calls the template makes do."""

    def __init__(self, plan: LoopPlan, cache: RenderCache, messages: list[Any],
                 sequence: tuple[bytes, bytes, list[int]] | None, found: Entry | None) -> None:
        self.plan, self.cache, self.messages = plan, cache, messages
        self.state: dict[str, Any] = {"start": 0, "mark": SEPARATOR}
        self.entered = self.left = False
        self.length = 0  # items the loop runs over
        self.reused: list[str] = []
        self.sequence, self.found = sequence, found  # (key, joined, ends) of the loop's items
        self.captured = b""
        self.storable = False
        self.wrapped = False  # an iteration read the sequence from its end
        self.reused_json: bytes | None = b""  # the reused texts' encoding (``None``: not known)
        self.source: list[Any] | None = None  # the items ``sequence`` serialises, if frozen

    def functions(self) -> dict[str, Any]:
        return {_ENTER: self.enter, _STATE: self.state, _LEAVE: self.leave, _AT: self.at}

    def at(self, sequence: Any, index: Any) -> Any:
        """``sequence[index]`` as the template reads it; an index that counts from the end makes the
        iteration depend on the last items, so the render is not kept."""
        if isinstance(index, int) and index < 0:
            self.storable = False
            self.wrapped = True
        return self.plan.template.environment.getitem(sequence, index)

    def enter(self, sequence: Any, captured: list[Any]) -> str:
        self.entered = True
        if not isinstance(sequence, list):
            return SEPARATOR
        self.length = len(sequence)
        try:
            self.captured = exact_bytes(captured)
            if sequence is not self.messages:  # a list the template made: its own items are serialised
                self.sequence = serialised(self.plan.salt + b"seq", sequence, exact=True)
                self.source = None  # not what this sequence serialises
                self.found = self.cache.longest(*self.sequence)
            self.storable = self.sequence is not None and not self.wrapped
        except _Inexact:
            return SEPARATOR
        entry = self.found
        if entry is not None and entry.captured == self.captured:
            old, n = len(entry.ends), self.length
            start = old if old == n else max(0, old - self.plan.ahead)
            if old < n and self.plan.fixed > old:
                start = 0
            self.state["start"] = start
            self.reused = entry.texts[:start]
            self.reused_json = None if start and len(entry.texts_json_ends) != len(entry.texts) else \
                entry.texts_json[:entry.texts_json_ends[start - 1]] if start else b""
        return SEPARATOR  # the reused texts go back in when the output is taken apart (``finish``)

    def leave(self) -> str:
        self.left = True
        return SEPARATOR

    def finish(self, raw: str) -> str | None:
        """The prompt from the raw output (``None``: render whole instead — the separator was in
        the data)."""
        if not self.entered:
            return raw if SEPARATOR not in raw else None
        parts = raw.split(SEPARATOR)
        start = self.state["start"]
        if not self.left or len(parts) != self.length - start + 3:
            return None
        head, _, *texts, tail = parts
        texts_all = [*self.reused, *texts]
        reused_json = self.reused_json
        reused_ends = self.found.texts_json_ends[:len(self.reused)] if self.reused and self.found is not None else []
        if reused_json is None:  # the earlier render kept no encoding: make it for them all
            texts, reused_json, reused_ends = texts_all, b"", []
        try:
            encoded = [orjson.dumps(text)[1:-1] for text in texts]
            around = (orjson.dumps(head)[:-1], orjson.dumps(tail)[1:])
        except orjson.JSONEncodeError:  # not UTF-8 encodable (a lone surrogate): the body will say so
            encoded, around = None, None
        texts_json = reused_json + b"".join(encoded) if encoded is not None else b""
        if self.storable and self.sequence is not None and len(self.sequence[2]) == self.length:
            key, joined, ends = self.sequence
            items = self.messages if self.plan.sequence == "messages" else None
            base = len(reused_json)
            json_ends = [*reused_ends, *(base + end for end in accumulate(map(len, encoded)))] \
                if encoded is not None else []
            size = (sum(sys.getsizeof(t) for t in texts_all) + len(texts_json) + 3 * len(joined) + 48 * len(ends)
                    + len(self.captured))
            self.cache.put(Entry(texts_all, key, joined, ends, self.captured, items, size, texts_json, json_ends,
                                 self.source))
            if self.reused:
                self.cache.hits += 1
                self.cache.reused += len(self.reused)
        prompt = "".join([head, *texts_all, tail])
        return prompt if around is None else JsonText(prompt, b"".join((around[0], texts_json, around[1])))


def render_resumable(plan: LoopPlan, cache: RenderCache, messages: Sequence[Mapping[str, Any]],
                     prepare: Callable[[Sequence[Mapping[str, Any]]], list[Any]], context: dict[str, Any],
                     owned: Callable[[Any], None], frozen: bool = False) -> str | None:
    """Render ``messages`` (prepared for the template by ``prepare``, message by message) and
    ``context`` with ``plan``'s template, reusing what ``cache`` proves reusable — prepared
    messages included; ``None`` when the output could not be taken apart (render whole instead).
    ``owned`` is told of the prepared messages (the caller's: the template may not change them).
    ``frozen``: the caller never changes ``messages``' items (nor anything in them) from here on,
    so a later render may recognise them by identity (``RenderCache.same_start``)."""
    sequence = None
    found = None
    prepared: list[Any] | None = None
    if plan.sequence == "messages":
        same = cache.same_start(plan.salt + b"raw", messages) if frozen else None
        if same is not None:
            sequence, found = same
        else:
            try:
                sequence = serialised(plan.salt + b"raw", messages)
            except _Inexact:
                sequence = None
            found = cache.longest(*sequence) if sequence is not None else None
        if found is not None and found.items is not None:
            known = len(found.items)
            prepared = [*found.items, *prepare(messages[known:])]
    if prepared is None:
        prepared = prepare(messages)
    owned(prepared)  # the sandbox keeps the template from changing them (they may be reused)
    run = _Run(plan, cache, prepared, sequence, found)
    if frozen and plan.sequence == "messages":
        run.source = list(messages)
    raw = render(plan.template, {**context, "messages": prepared, **run.functions()})
    return run.finish(raw)
