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
iteration — makes the render one that is not kept), and skipping, past ``start``, each iteration
taken from the render before (a set test: it writes its mark alone). The render is given the
state an earlier render of the same conversation left (``Resume.previous``, ``RenderState``: the
prefix service, ``app.prefix``, keeps it). The first call serialises each item of the sequence
exactly (``marshal``, else ``exact_bytes``: an item that cannot be serialised exactly — a tuple,
a ``str`` or ``dict`` subclass other than tool arguments, a non-finite float — stops reuse; the
caller's own message objects, promised unchanged, are known again by identity) and compares them
with the earlier render's, place by place. Iteration *i* is taken from the earlier render when the
items it reads — from *i − behind* to *i + ahead*, and the fixed ones — are the same at the same
places (or absent from both), and the captured values are byte-identical; where captured values
differ, when each differing one is read only through *guards* — expressions of the captured
values and of the iteration's place alone, such as Qwen3's ``loop.index0 > ns.last_query_index``
(``Guards``) — the guards are evaluated for both renders, iteration by iteration, and an
iteration whose guards come out the same is still taken. So an appended turn, a rewritten last
message and an edited early one each re-render only the iterations around what changed.
Everything before and after the loop runs as usual. Each iteration's text is cut out of the output
by a per-process random separator; if the data itself holds the separator, the counts do not match
and the template is rendered whole.

A template that fails the proof (many do: loops that set namespace flags, Kimi K2's list building)
is always rendered whole. What a render leaves (``RenderState``, in ``Resume.state``): the text of
each loop iteration and its JSON encoding, the sequence's items and the captured values serialised
(and the values, for replaying guards) — the prefix service keeps it, within its byte budget.
"""

from __future__ import annotations

import marshal
import math
import secrets
import sys
from collections.abc import Callable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from operator import is_
from typing import Any

import jinja2
import orjson
from jinja2 import nodes
from jinja2.utils import Namespace
from jinja2.visitor import NodeTransformer

from app.jsontext import JsonText
from app.templates.fastrender import render

#: separates the loop's iterations in a resumable render's raw output; random per process, so no
#: client can put it in a message on purpose (and by chance, a count mismatch catches it)
SEPARATOR = f"\x00tw-loop-{secrets.token_hex(12)}\x00"

_ENTER, _STATE, _LEAVE, _AT, _SKIP = "__tw_loop_enter", "__tw_loop", "__tw_loop_leave", "__tw_loop_at", "__tw_taken"
#: main-loop ``loop`` attributes a body may read, and how far behind and ahead each looks
_LOOP_ATTRS = {"index0": (0, 0), "index": (0, 0), "first": (0, 0), "previtem": (1, 0), "last": (0, 1),
               "nextitem": (0, 1)}
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
    guards: Guards | None = None  # how the captured values are read, where that allows a replay
    behind: int = 0  # items before its own an iteration reads (``loop.previtem``, ``seq[loop.index0 - 1]``)


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
        guards = _guards(env, main, captured, walk.macro_reads)  # before ``_resumable`` changes the body
        template = _resumable(env, ast, main, parent, captured)
        return LoopPlan(template, sequence, walk.ahead, walk.fixed, captured, guards, walk.behind)
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
        self.behind = 0
        self.fixed = 0
        self.breaks = False
        self.macro_reads: set[str] = set()  # outer names the macros it calls read
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
            behind, ahead = _LOOP_ATTRS[node.attr]
            self.ahead, self.behind = max(self.ahead, ahead), max(self.behind, behind)
            return
        if isinstance(node, nodes.Getitem) and isinstance(node.node, nodes.Name) and node.node.name == self.sequence:
            if in_macro:
                raise NotProven("a macro reads the sequence")
            offset = _relative_index(node.arg, inner_loop)
            if offset is not None:
                self.ahead, self.behind = max(self.ahead, offset), max(self.behind, -offset)
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
        self.macro_reads |= free
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
    # an iteration taken from the render before (past one that is not) writes its mark alone
    skip = nodes.If(nodes.Compare(nodes.Add(_loop("index0"), _start()), [nodes.Operand("in", nodes.Name(_SKIP, "load"))]),
                    [nodes.Continue()], [], [])
    main.body = [nodes.Output([nodes.Getattr(nodes.Name(_STATE, "load"), "mark", "load")]), skip,
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


# --------------------------------------------------------------------------- guards

#: the main loop's ``loop`` attributes a guard may read: where the iteration is, nothing of its items
_PLACE = frozenset({"index0", "index", "first", "last"})
_I, _N, _INDICES, _PUT = "__tw_i", "__tw_n", "__tw_indices", "__tw_put"


class Guards:
    """How the loop body reads the captured values, when it reads them only through *guards*:
    expressions of the captured values and of the iteration's place (``loop.index0``, ``index``,
    ``first``, ``last``) alone — Qwen3's ``loop.index0 > ns.last_query_index``, a
    ``tools | length``. An iteration's text depends on the captured values only through its guards'
    values, so where a captured value changed (the last user turn moved on: the conversation got a
    new user message), an earlier iteration whose guards all come out as they did is still the
    text it was. ``names``: the captured names read only so (never by a macro, never assigned in
    the loop body); a change to any other means rendering the loop again.

    ``outcomes(values, captured, indices, n)``: each iteration's guards, evaluated together for
    every index of ``indices`` in a loop over ``n`` items with ``captured`` bound to ``values``
    (an ``Outcome`` each); ``None`` when the guards cannot be worked out at all (one raised: they
    are evaluated apart from the conditions that guard them in the template)."""

    def __init__(self, template: jinja2.Template, names: frozenset[str], count: int) -> None:
        self.template, self.names, self.count = template, names, count

    def outcomes(self, values: Sequence[Any], captured: Sequence[str], indices: range,
                 n: int) -> list[Outcome] | None:
        got: list[Outcome] = []
        token = _collected.set(got)
        try:
            render(self.template, {**dict(zip(captured, values, strict=True)), _INDICES: indices, _N: n})
        except Exception:  # noqa: BLE001 — a guard that fails out of place: no replay (render the loop)
            return None
        finally:
            _collected.reset(token)
        return got


#: one iteration's guard values: each a plain scalar (``bool``, ``int``, ``str``, ``None``, a finite
#: ``float``) or, for anything else, its exact bytes — ``None`` when one cannot be known exactly
Outcome = tuple[Any, ...] | None
#: where the guard template's ``__tw_put`` filter puts the outcomes of the evaluation under way
_collected: ContextVar[list[Outcome]] = ContextVar("guard_outcomes")


def _put(values: list[Any]) -> str:
    """The guard template's filter: one iteration's guard values, kept as an ``Outcome``."""
    leaves: list[Any] = []
    for value in values:
        kind = type(value)
        if kind is bool or kind is int or kind is str or value is None or (kind is float and math.isfinite(value)):
            leaves.append(value)
            continue
        try:
            leaves.append(exact_bytes(value))
        except _Inexact:
            _collected.get().append(None)
            return ""
    _collected.get().append(tuple(leaves))
    return ""


def same_outcome(old: Outcome, new: Outcome) -> bool:
    """Two iterations' guards came out alike: the same values of the same types (``True`` is not ``1``)."""
    return old is not None and new is not None and old == new and all(map(is_, map(type, old), map(type, new)))


def _guards(env: jinja2.Environment, main: nodes.For, captured: tuple[str, ...],
            macro_reads: set[str]) -> Guards | None:
    """The main loop body's guards (see ``Guards``), compiled into one template that evaluates
    them for a range of iterations; ``None`` when there is nothing to replay."""
    assigned = {name.name for node in main.find_all((nodes.Assign, nodes.AssignBlock, nodes.For))
                for name in _names(node.target)}  # type: ignore[attr-defined]
    outer = set(captured) - assigned
    if not outer:
        return None
    finder = _GuardFinder(env, outer)
    for child in main.body:
        finder.statement(child, False)
    copies = [_AtPlace().visit(_copied(guard)) for guard in finder.found]
    loop = nodes.For(nodes.Name(_I, "store"), nodes.Name(_INDICES, "load"),
                     [nodes.Output([nodes.Filter(nodes.List(copies), _PUT, [], [], None, None)])],
                     [], None, False)
    ast = nodes.Template([loop])
    for node in [ast, *ast.find_all(nodes.Node)]:
        node.lineno = main.lineno
    ast.set_environment(env)
    env.filters[_PUT] = _put
    template = env.template_class.from_code(env, env.compile(ast), env.make_globals(None), None)
    return Guards(template, frozenset(outer - macro_reads), len(copies))


class _GuardFinder:
    """Finds the guards of a loop body: its maximal expressions that read captured names
    (``outer``) and otherwise only constants and the main loop's place — never an item, a local
    name, a macro. ``nested``: inside a nested loop, where ``loop`` is that loop's."""

    _COMPOUND = (nodes.Getattr, nodes.Getitem, nodes.Slice, nodes.Compare, nodes.Operand, nodes.BinExpr,
                 nodes.UnaryExpr, nodes.CondExpr, nodes.Concat, nodes.List, nodes.Tuple, nodes.Dict, nodes.Pair,
                 nodes.Keyword)

    def __init__(self, env: jinja2.Environment, outer: set[str]) -> None:
        self.env, self.outer = env, outer
        self.found: list[nodes.Node] = []

    def pure(self, node: nodes.Node, nested: bool) -> bool:
        if isinstance(node, nodes.Const):
            return True
        if isinstance(node, nodes.Name):
            return node.name in self.outer
        if isinstance(node, nodes.Getattr) and isinstance(node.node, nodes.Name) and node.node.name == "loop":
            return not nested and node.attr in _PLACE
        if isinstance(node, nodes.Call):  # a method that changes nothing, of a pure value
            if (not isinstance(node.node, nodes.Getattr) or node.node.attr in _MUTATORS
                    or node.dyn_args is not None or node.dyn_kwargs is not None):
                return False
        elif isinstance(node, (nodes.Filter, nodes.Test)):
            known = self.env.filters if isinstance(node, nodes.Filter) else self.env.tests
            if node.name in _IMPURE_FILTERS or node.name not in known or node.node is None:
                return False
        elif not isinstance(node, self._COMPOUND):
            return False
        return all(self.pure(child, nested) for child in node.iter_child_nodes())

    def expression(self, node: nodes.Node, nested: bool) -> None:
        standalone = isinstance(node, nodes.Expr) and not isinstance(node, (nodes.Slice, nodes.Operand, nodes.Pair,
                                                                              nodes.Keyword))
        if standalone and self.pure(node, nested) and any(n.name in self.outer for n in _names(node)):
            self.found.append(node)
            return
        for child in node.iter_child_nodes():
            self.expression(child, nested)

    def statement(self, node: nodes.Node, nested: bool) -> None:
        if isinstance(node, nodes.For):
            self.expression(node.iter, nested)
            if node.test is not None:
                self.expression(node.test, True)
            for child in node.body:
                self.statement(child, True)
            for child in node.else_:
                self.statement(child, nested)
            return
        expressions: list[nodes.Node] = []
        statements: list[nodes.Node] = []
        if isinstance(node, nodes.If):
            expressions, statements = [node.test], [*node.body, *node.elif_, *node.else_]
        elif isinstance(node, nodes.Output):
            expressions = list(node.nodes)
        elif isinstance(node, nodes.Assign):
            expressions = [node.node]
        elif isinstance(node, nodes.AssignBlock):
            expressions, statements = ([node.filter] if node.filter is not None else []), list(node.body)
        elif isinstance(node, nodes.Scope):
            statements = list(node.body)
        for expression in expressions:
            self.expression(expression, nested)
        for child in statements:
            self.statement(child, nested)


def _copied(node: Any) -> Any:
    """A deep copy of an expression's nodes (not of the environment they point to)."""
    if isinstance(node, list):
        return [_copied(child) for child in node]
    if not isinstance(node, nodes.Node):
        return node
    made = object.__new__(type(node))
    for name in (*node.fields, *node.attributes):
        setattr(made, name, _copied(getattr(node, name, None)) if name != "environment" else node.environment)
    return made


class _AtPlace(NodeTransformer):
    """A guard copied out of the loop: ``loop.index0`` and the rest said by the iteration's index
    (``__tw_i``) and the loop's length (``__tw_n``)."""

    def visit_Getattr(self, node: nodes.Getattr) -> nodes.Node:
        if not (isinstance(node.node, nodes.Name) and node.node.name == "loop"):
            return self.generic_visit(node)
        i = nodes.Name(_I, "load")
        if node.attr == "index0":
            return i
        if node.attr == "index":
            return nodes.Add(i, nodes.Const(1))
        if node.attr == "first":
            return nodes.Compare(i, [nodes.Operand("eq", nodes.Const(0))])
        assert node.attr == "last"
        return nodes.Compare(i, [nodes.Operand("eq", nodes.Sub(nodes.Name(_N, "load"), nodes.Const(1)))])


# --------------------------------------------------------------------------- the check


class _Inexact(ValueError):
    pass


def _exact_default(value: Any) -> Any:
    """orjson's hook for values it does not serialise itself (subclasses are passed through here):
    each written as bytes no JSON value encodes to (a NUL byte, which orjson escapes in any string),
    the same in every process."""
    kind = type(value)
    if isinstance(value, jinja2.Undefined):
        return orjson.Fragment(b"\x00U")
    if kind is Namespace:
        return orjson.Fragment(b"\x00N" + exact_bytes(object.__getattribute__(value, "_Namespace__attrs")))
    if kind.__name__ == "JsonArguments" and isinstance(value, dict):
        return orjson.Fragment(b"\x00A" + exact_bytes(dict(value)))
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


def _item_bytes(item: Any) -> bytes:
    """An item serialised exactly: ``marshal`` (C speed, exact types, no shared references at
    version 2) where it can, else ``exact_bytes`` — tagged, so the two never meet (``_Inexact``
    where neither is exact)."""
    try:
        return b"m" + marshal.dumps(item, 2)
    except ValueError:
        return b"j" + exact_bytes(item)


def common_prefix(old: Sequence[Any], new: Sequence[Any]) -> int:
    """How many first elements ``old`` and ``new`` share (the same object, or equal)."""
    n = 0
    for a, b in zip(old, new):  # noqa: B905 — the shorter one ends the prefix
        if a is not b and a != b:
            break
        n += 1
    return n


@dataclass(eq=False)
class RenderState:
    """What one resumable render leaves for the next render of the same conversation: the text of
    each loop iteration (``texts``) and their JSON encodings one after the other (``texts_json``,
    text ``i`` ending at ``texts_json_ends[i]``), each loop item serialised exactly (``items``), the
    value of each captured name serialised (``captured``) and the values themselves (``values``, for
    replaying guards; ``None`` when they could not be kept), and, when the loop ran over the
    messages themselves, the caller's messages (``source``: recognised again by identity, the
    caller having promised never to change them) and each as prepared for the template
    (``prepared``). ``size`` is what it counts against a byte bound (``sys.getsizeof`` of the
    texts, the serialised bytes, three times those of the items)."""

    texts: list[str]
    texts_json: bytes
    texts_json_ends: list[int]
    items: list[bytes]
    captured: list[bytes]
    values: list[Any] | None
    source: list[Any] | None
    prepared: list[Any] | None
    size: int
    #: guard outcomes under ``values``, iteration by iteration, as far as they were worked out
    outcomes: list[Outcome] = field(default_factory=list)

    def __getstate__(self) -> dict[str, Any]:
        """Pickled (from a worker) without what only this process can vouch for — the caller's
        messages (identity means nothing elsewhere), the captured values (namespaces and the like
        need not pickle) — nor the prepared messages (prepared again here if needed: cheaper
        than pickling them both ways)."""
        state = dict(self.__dict__)
        state["source"] = state["values"] = state["prepared"] = None
        return state


class Resume:
    """One render's link to the conversation it continues: ``previous`` is the state of an earlier
    render of it (``None``: none), ``state`` the state this render leaves (``None``: nothing to
    keep — the template is not resumable, or the render read the sequence from its end), and
    ``reused`` how many of its loop iterations were taken from ``previous``."""

    __slots__ = ("previous", "reused", "state")

    def __init__(self, previous: RenderState | None = None) -> None:
        self.previous = previous
        self.state: RenderState | None = None
        self.reused = 0


#: guard outcomes worked out in one go at most (a replay beyond is not tried: rendered instead)
MAX_REPLAY = 4096


def _equal(old: Sequence[bytes], new: Sequence[bytes]) -> list[bool]:
    """Item by item, over the places both have: whether the two sequences hold the same bytes there."""
    return [a is b or a == b for a, b in zip(old, new)]  # noqa: B905 — the places both have


class _Run:
    """One resumable render's state: what the calls the template makes do."""

    def __init__(self, plan: LoopPlan, resume: Resume, messages: list[Any], items: list[bytes] | None,
                 equal: list[bool] | None, source: list[Any] | None) -> None:
        self.plan, self.resume, self.messages = plan, resume, messages
        self.state: dict[str, Any] = {"start": 0, "mark": SEPARATOR}
        self.entered = self.left = False
        self.length = 0  # items the loop runs over
        self.items, self.equal, self.source = items, equal, source  # the loop's items, when it runs over the messages
        self.captured: list[bytes] = []
        self.values: list[Any] | None = None
        self.outcomes: list[Outcome] = []
        self.taken: set[int] = set()  # iterations past ``start`` taken from the render before
        self.storable = False
        self.wrapped = False  # an iteration read the sequence from its end

    def functions(self) -> dict[str, Any]:
        return {_ENTER: self.enter, _STATE: self.state, _LEAVE: self.leave, _AT: self.at, _SKIP: self.taken}

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
        previous = self.resume.previous
        try:
            self.captured = [exact_bytes(value) for value in captured]
            if sequence is not self.messages:  # a list the template made: its own items are serialised
                self.items = [b"j" + exact_bytes(item) for item in sequence]
                self.source = None
                self.equal = _equal(previous.items, self.items) if previous is not None else None
            self.storable = self.items is not None and not self.wrapped
        except _Inexact:
            return SEPARATOR
        self.values = captured
        if previous is not None and self.equal is not None:
            reusable = self._reusable(previous, self.equal)
            start = 0
            while start < len(reusable) and reusable[start]:
                start += 1
            self.state["start"] = start
            self.taken.update(i for i in range(start, len(reusable)) if reusable[i])
        return SEPARATOR  # the reused texts go back in when the output is taken apart (``finish``)

    def _reusable(self, previous: RenderState, equal: list[bool]) -> list[bool]:
        """Iteration by iteration (over the places both renders have), whether the earlier render's
        text is this one's: the items it reads (``behind`` before its own, ``ahead`` after it, and
        the fixed ones) are the same at the same places — or absent from both — and so is what it
        read of the captured values (``_replayed``)."""
        plan, old, n = self.plan, len(previous.items), self.length
        both = min(old, n)

        # place by place, whether the item there is the same in both renders (or absent from both)
        same = [*equal, *([old == n] * (plan.ahead + 1))]
        if not all(same[:plan.fixed]) or len(same) < plan.fixed:
            return []
        # iteration i reads the places from i - behind to i + ahead: a window of sames
        differ = [0]
        for s in same:
            differ.append(differ[-1] + (not s))
        behind, ahead = plan.behind, plan.ahead
        reusable = [differ[i + ahead + 1] == differ[max(0, i - behind)] for i in range(both)]
        if previous.captured == self.captured:  # the same values: the same outcomes (not where ``last`` moved)
            self.outcomes = previous.outcomes[:max(0, both - 1)]
            return reusable
        return self._replayed(previous, reusable)

    def _replayed(self, previous: RenderState, reusable: list[bool]) -> list[bool]:
        """``reusable``, where the captured values differ from the earlier render's, kept for the
        iterations whose guards come out the same now and then: each differing name must be one
        the loop reads only through guards (expressions of the captured values and the
        iteration's place alone, ``LoopPlan.guards``)."""
        guards = self.plan.guards
        upto = len(reusable)
        while upto and not reusable[upto - 1]:
            upto -= 1
        if (guards is None or previous.values is None or len(previous.captured) != len(self.captured)
                or upto > MAX_REPLAY):
            return []
        for name, was, now in zip(self.plan.captured, previous.captured, self.captured, strict=True):
            if was != now and name not in guards.names:
                return []
        old = previous.outcomes
        if len(old) < upto:
            more = guards.outcomes(previous.values, self.plan.captured, range(len(old), upto), len(previous.items))
            if more is None:
                return []
            old = previous.outcomes = [*old, *more]
        new = guards.outcomes(self.values or [], self.plan.captured, range(upto), self.length)
        if new is None:
            return []
        agreed = [reusable[i] and same_outcome(old[i], new[i]) for i in range(upto)]
        same = 0
        while same < upto and new[same] is not None:
            same += 1
        self.outcomes = new[:same]  # this render's outcomes, as far as they are known (all known)
        return agreed

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
        head, _, *fresh, tail = parts
        previous = self.resume.previous
        old = previous.texts if previous is not None else []
        texts = [*old[:start], *(old[i] if i in self.taken else text for i, text in enumerate(fresh, start))]
        self.resume.reused = start + len(self.taken)
        prompt = "".join([head, *texts, tail])
        try:
            encoded, ends = self._encoded(texts, start)
            around = (orjson.dumps(head)[:-1], orjson.dumps(tail)[1:])
        except orjson.JSONEncodeError:  # not UTF-8 encodable (a lone surrogate): the body will say so
            return prompt
        texts_json = b"".join(encoded)
        if self.storable and self.items is not None and len(self.items) == self.length:
            size = (sum(sys.getsizeof(t) for t in texts) + len(texts_json) + 3 * sum(map(len, self.items))
                    + 56 * len(self.items) + sum(map(len, self.captured)))
            prepared = self.messages if self.plan.sequence == "messages" else None
            self.resume.state = RenderState(texts, texts_json, ends, self.items, self.captured, self.values,
                                            self.source, prepared, size, self.outcomes)
        return JsonText(prompt, b"".join((around[0], texts_json, around[1])))

    def _encoded(self, texts: list[str], start: int) -> tuple[list[bytes], list[int]]:
        """Each text's JSON encoding (without its quotes) and where each ends, one after the other:
        a text taken from the render before brings its encoding along."""
        previous = self.resume.previous
        encoded: list[bytes] = []
        ends: list[int] = []
        if start and previous is not None:
            encoded.append(previous.texts_json[:previous.texts_json_ends[start - 1]])
            ends = list(previous.texts_json_ends[:start])
        size = ends[-1] if ends else 0
        for i in range(start, len(texts)):
            if i in self.taken and previous is not None:
                old_ends = previous.texts_json_ends
                piece = previous.texts_json[old_ends[i - 1] if i else 0:old_ends[i]]
            else:
                piece = orjson.dumps(texts[i])[1:-1]
            encoded.append(piece)
            size += len(piece)
            ends.append(size)
        return encoded, ends


def render_resumable(plan: LoopPlan, resume: Resume, messages: Sequence[Mapping[str, Any]],
                     prepare: Callable[[Sequence[Mapping[str, Any]]], list[Any]], context: dict[str, Any],
                     owned: Callable[[Any], None], frozen: bool = False) -> str | None:
    """Render ``messages`` (prepared for the template by ``prepare``, message by message) and
    ``context`` with ``plan``'s template, reusing what ``resume.previous`` proves reusable —
    prepared messages included — and leaving this render's state in ``resume.state``; ``None``
    when the output could not be taken apart (render whole instead). ``owned`` is told of the
    prepared messages (the caller's: the template may not change them). ``frozen``: the caller
    never changes ``messages``' items (nor anything in them) from here on, so a later render may
    recognise them by identity."""
    previous = resume.previous
    items: list[bytes] | None = None
    equal: list[bool] | None = None
    prepared: list[Any] | None = None
    if plan.sequence == "messages":
        same = previous.source if previous is not None and previous.source is not None and frozen else ()
        try:
            items = [previous.items[i] if i < len(same) and same[i] is message else _item_bytes(message)  # type: ignore[union-attr]
                     for i, message in enumerate(messages)]
        except _Inexact:
            items = None
        if items is not None and previous is not None:
            equal = _equal(previous.items, items)
            old = previous.prepared
            if old is not None and any(equal):  # a message prepared before is the same prepared again
                fresh = [i for i, e in enumerate(equal) if not e] + list(range(len(equal), len(messages)))
                made = iter(prepare([messages[i] for i in fresh]))
                known = set(fresh)
                prepared = [next(made) if i in known else old[i] for i in range(len(messages))]
            for i, e in enumerate(equal):
                if e:
                    items[i] = previous.items[i]  # the same bytes: kept once
    if prepared is None:
        prepared = prepare(messages)
    owned(prepared)  # the sandbox keeps the template from changing them (they may be reused)
    run = _Run(plan, resume, prepared, items, equal,
               list(messages) if frozen and plan.sequence == "messages" else None)
    raw = render(plan.template, {**context, "messages": prepared, **run.functions()})
    return run.finish(raw)
