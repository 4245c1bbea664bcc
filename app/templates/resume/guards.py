"""Guards: the expressions through which a loop body reads the captured values (``Guards``).

``_guards`` finds them in a main loop's body (at plan time) and compiles them into one template;
``Guards.outcomes`` evaluates them, iteration by iteration, for given captured values (an
``Outcome`` each); ``same_outcome`` says whether an iteration's guards came out alike in two
renders — where they do, its text is what it was though a captured value changed."""

from __future__ import annotations

import math
from collections.abc import Sequence
from contextvars import ContextVar
from operator import is_
from typing import Any

import jinja2
from jinja2 import nodes
from jinja2.visitor import NodeTransformer

from app.templates.fastrender import render
from app.templates.resume.exact import _Inexact, exact_bytes
from app.templates.resume.purity import _IMPURE_FILTERS, _MUTATORS, _names

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
