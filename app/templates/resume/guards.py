"""Guards: the expressions through which a loop body reads the captured values (``Guards``).

``_guards`` finds them in a main loop's body (at plan time) and compiles them into one template;
``Guards.outcomes`` evaluates them, iteration by iteration, for given captured values (an
``Outcome`` each); ``same_outcome`` says whether an iteration's guards came out alike in two
renders — where they do, its text is what it was though a captured value changed.
``Guards.places`` narrows that down, where the guards allow it, to the few iterations whose
guards can come out differently at all (``Reach``)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from operator import is_
from typing import Any

import jinja2
from jinja2 import nodes
from jinja2.visitor import NodeTransformer

from app.templates.fastrender import render
from app.templates.resume.exact import _Inexact, exact_bytes
from app.templates.resume.purity import _MUTATORS, PLACE_SHIFTS, _names, loop_attr, pure_filter_or_test

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

    def __init__(self, template: jinja2.Template, names: frozenset[str], count: int,
                 reach: tuple[Reach, ...] = (), sides: jinja2.Template | None = None) -> None:
        self.template, self.names, self.count = template, names, count
        self.reach, self.sides = reach, sides

    def outcomes(self, values: Sequence[Any], captured: Sequence[str], indices: Sequence[int],
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

    def places(self, old: Sequence[Any], new: Sequence[Any], captured: Sequence[str], changed: frozenset[str],
               lengths: tuple[int, int], upto: int) -> list[int] | None:
        """The iterations below ``upto`` whose guards may come out differently with the captured
        values ``old`` (a loop over ``lengths[0]`` items) and ``new`` (over ``lengths[1]``), the
        names in ``changed`` being those that differ — every other iteration's guards come out
        alike, without being evaluated; ``None`` when the guards do not allow the narrowing
        (evaluate them all). A guard reading no changed name is alike everywhere but where
        ``loop.last`` moved; a comparison of the iteration's place with an integer of the captured
        values (``loop.index0 > ns.last_query_index``) differs only between its two integers."""
        if len(self.reach) != self.count:
            return None
        sides: list[tuple[Any, Any]] = []
        if any(r.side is not None and r.reads & changed for r in self.reach):
            before, after = self._sides(old, captured), self._sides(new, captured)
            if before is None or after is None:
                return None
            sides = list(zip(before, after, strict=True))
        found: set[int] = set()
        for r in self.reach:
            if r.last:
                found.update((lengths[0] - 1, lengths[1] - 1))
            if not r.reads & changed:
                continue
            if r.side is None:
                return None
            a, b = sides[r.side]
            if type(a) is not int or type(b) is not int:  # (``True`` is not ``1`` to a guard's outcome)
                return None
            found.update(range(max(0, min(a, b) - r.shift), min(upto, max(a, b) - r.shift + 1)))
        return sorted(i for i in found if 0 <= i < upto)

    def _sides(self, values: Sequence[Any], captured: Sequence[str]) -> Outcome:
        """The captured sides of the place comparisons, evaluated once for ``values``."""
        if self.sides is None:
            return ()
        got: list[Outcome] = []
        token = _collected.set(got)
        try:
            render(self.sides, dict(zip(captured, values, strict=True)))
        except Exception:  # noqa: BLE001 — as for the guards themselves: no narrowing
            return None
        finally:
            _collected.reset(token)
        return got[0] if len(got) == 1 else None


@dataclass(frozen=True, slots=True)
class Reach:
    """What one guard's outcome can depend on: the captured names it reads (``reads``), whether it
    reads ``loop.last`` (``last``), and — for a comparison of the iteration's place (``loop.index0``,
    ``loop.index``: ``shift`` 0 or 1) with an expression of the captured values alone — that
    expression's position among the ``Guards.sides`` (``side``; ``None``: not such a comparison)."""

    reads: frozenset[str]
    last: bool
    side: int | None = None
    shift: int = 0


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
    env.filters[_PUT] = _put
    template = _compiled(env, [loop], main.lineno)
    reach: list[Reach] = []
    sides: list[nodes.Node] = []
    for guard in finder.found:
        reads = frozenset(n.name for n in _names(guard) if n.name in outer)
        last = any(loop_attr(node) == "last" for node in guard.find_all(nodes.Getattr))
        compared = _place_comparison(guard)
        if compared is not None:
            sides.append(_copied(compared[0]))
        reach.append(Reach(reads, last, len(sides) - 1 if compared is not None else None,
                           compared[1] if compared is not None else 0))
    put: list[nodes.Node] = [nodes.Output([nodes.Filter(nodes.List(sides), _PUT, [], [], None, None)])]
    return Guards(template, frozenset(outer - macro_reads), len(copies), tuple(reach),
                  _compiled(env, put, main.lineno) if sides else None)


def _compiled(env: jinja2.Environment, body: list[nodes.Node], lineno: int) -> jinja2.Template:
    """A template of these statements (at the main loop's line, for its error messages)."""
    ast = nodes.Template(body)
    for node in [ast, *ast.find_all(nodes.Node)]:
        node.lineno = lineno
    ast.set_environment(env)
    return env.template_class.from_code(env, env.compile(ast), env.make_globals(None), None)


#: the comparisons whose outcome over the places changes only between the two values compared
_ORDERS = frozenset({"eq", "ne", "gt", "gteq", "lt", "lteq"})


def _place_comparison(guard: nodes.Node) -> tuple[nodes.Node, int] | None:
    """For ``loop.index0 <op> side`` (or ``side <op> loop.index``, …) where ``side`` reads no
    ``loop``: ``side`` and what the place adds to the index; else ``None``."""
    if not isinstance(guard, nodes.Compare) or len(guard.ops) != 1 or guard.ops[0].op not in _ORDERS:
        return None
    left, right = guard.expr, guard.ops[0].expr
    for place, side in ((left, right), (right, left)):
        attr = loop_attr(place)
        if attr in PLACE_SHIFTS and not any(n.name == "loop" for n in _names(side)):
            return side, PLACE_SHIFTS[attr]
    return None


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
        attr = loop_attr(node)
        if attr is not None:
            return not nested and attr in _PLACE
        if isinstance(node, nodes.Call):  # a method that changes nothing, of a pure value
            if (not isinstance(node.node, nodes.Getattr) or node.node.attr in _MUTATORS
                    or node.dyn_args is not None or node.dyn_kwargs is not None):
                return False
        elif isinstance(node, (nodes.Filter, nodes.Test)):
            if not pure_filter_or_test(self.env, node) or node.node is None:
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
        if loop_attr(node) is None:
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
