"""The reverse scan before the main loop, run only where it can find something new (``scan_of``).

Qwen3's template and the templates built on it (StepFun 3.5, Ling 3.0, MiniCPM 5) look for the
last user query before their main loop, walking the whole conversation backwards every render::

    {%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
    {%- for message in messages[::-1] %}
        {%- set index = (messages|length - 1) - loop.index0 %}
        {%- if ns.multi_step_tool and message.role == "user" and ... %}
            {%- set ns.multi_step_tool = false %}
            {%- set ns.last_query_index = index %}
        {%- endif %}
    {%- endfor %}

In an agent's loop the query is the task at the start, so the walk passes every message each turn:
the render's one pass over the whole conversation that the main loop's reuse does not spare.

**The proof (static).** A loop qualifies when it stands beside the main loop, before it, and runs
over the main loop's sequence reversed (``seq[::-1]``) with a plain target, and its body is

* assignments of *place locals* — integer sums and differences of ``loop.index0``,
  ``loop.index``, ``seq|length`` and integer constants (they cannot fail) — then
* one ``if`` without ``elif`` or ``else`` whose test is ``ns.F and …`` (the *flag* first), inside
  which every test and every assignment to a plain name reads only the iteration's item
  (*item-only*: the target, locals made from it, constants, pure filters and tests, methods that
  change nothing, and macros that read nothing but their parameters), and every namespace
  assignment stands in one block of assignments that sets ``ns.F = false`` (the *flip*).

Nothing else writes output or state. So while the flag holds, whether an iteration flips depends
on its item alone; once it flips, no later iteration does anything at all (the flag is read first,
and place locals cannot fail).

**The run (``render._Run.scan_enter``).** The render before left the place of its flip (or that
there was none, with the flag up when the loop began). When the flag is up again, the places whose
items are the same as then at the same places keep their answer: those after the flip did not
flip, the flip's own still does. The loop runs over the new and changed places after the flip,
newest first, and the flip's own place (all places up to it, when its item changed) — with
``loop.index0`` and ``loop.index`` saying what they say in the whole walk. An appended turn runs
the new messages and the flip: a few iterations, not one per message."""

from __future__ import annotations

from dataclasses import dataclass

import jinja2
from jinja2 import nodes
from jinja2.visitor import NodeTransformer

from app.templates.resume.purity import _MUTATORS, PLACE_SHIFTS, PURE_CALLS, loop_attr, pure_filter_or_test

_SCAN, _SCAN_ENTER, _SCAN_FLIP = "__tw_scan", "__tw_scan_enter", "__tw_scan_flip"
#: expression nodes an item-only expression may hold
_ITEM_NODES = (nodes.Const, nodes.Name, nodes.Getattr, nodes.Getitem, nodes.Slice, nodes.Call, nodes.Filter,
               nodes.Test, nodes.CondExpr, nodes.And, nodes.Or, nodes.Not, nodes.Compare, nodes.Operand,
               nodes.BinExpr, nodes.UnaryExpr, nodes.Concat, nodes.List, nodes.Tuple, nodes.Dict, nodes.Pair,
               nodes.Keyword)
#: filters that give the sequence's length (a place local may read ``seq|length``)
_LENGTH = frozenset({"length", "count"})


@dataclass(frozen=True, slots=True)
class ScanPlan:
    """A reverse scan proven (``scan_of``): the namespace and flag attribute it reads first."""

    namespace: str
    flag: str


class _Refused(Exception):
    pass


def scan_of(env: jinja2.Environment, main: nodes.For, parent: list[nodes.Node],
            macros: dict[str, nodes.Macro]) -> ScanPlan | None:
    """The reverse scan standing before ``main`` in ``parent``, rewritten in place to run over the
    places ``render`` gives it (see the module docstring), or ``None`` (nothing is changed)."""
    assert isinstance(main.iter, nodes.Name)
    sequence = main.iter.name
    at = next(i for i, node in enumerate(parent) if node is main)
    for k in range(at):
        loop = parent[k]
        if not isinstance(loop, nodes.For):
            continue
        try:
            plan = _proven(loop, sequence, env, macros)
        except _Refused:
            continue
        _rewrite(env, loop, parent, k, sequence, plan)
        return plan
    return None


def _proven(loop: nodes.For, sequence: str, env: jinja2.Environment, macros: dict[str, nodes.Macro]) -> ScanPlan:
    it = loop.iter
    if not (isinstance(it, nodes.Getitem) and isinstance(it.node, nodes.Name) and it.node.name == sequence
            and isinstance(it.arg, nodes.Slice) and it.arg.start is None and it.arg.stop is None
            and _minus_one(it.arg.step)):
        raise _Refused
    if not isinstance(loop.target, nodes.Name) or loop.test is not None or loop.recursive or loop.else_:
        raise _Refused
    *places, test = loop.body if loop.body else [None]
    if not isinstance(test, nodes.If) or test.elif_ or test.else_:
        raise _Refused
    locals_: set[str] = set()
    for assign in places:
        if not (isinstance(assign, nodes.Assign) and isinstance(assign.target, nodes.Name)
                and _place_arithmetic(assign.node, sequence)):
            raise _Refused
        locals_.add(assign.target.name)
    conjuncts = _conjuncts(test.test)
    first = conjuncts[0]
    if not (isinstance(first, nodes.Getattr) and isinstance(first.node, nodes.Name)):
        raise _Refused
    plan = ScanPlan(first.node.name, str(first.attr))
    if plan.namespace in {loop.target.name, sequence, "loop"} | locals_:
        raise _Refused
    check = _ItemOnly(env, macros, {loop.target.name})
    for conjunct in conjuncts[1:]:
        check.expression(conjunct)
    flips: list[list[nodes.Node]] = []
    check.block(test.body, plan, flips, places=locals_, sequence=sequence)
    if len(flips) != 1:
        raise _Refused
    return plan


def _minus_one(node: nodes.Node | None) -> bool:
    """Whether ``node`` is ``-1`` (Jinja reads it as the negation of ``1``)."""
    if isinstance(node, nodes.Neg):
        return isinstance(node.node, nodes.Const) and type(node.node.value) is int and node.node.value == 1
    return isinstance(node, nodes.Const) and type(node.value) is int and node.value == -1


def _conjuncts(test: nodes.Node) -> list[nodes.Node]:
    """``a and b and c`` as ``[a, b, c]`` (Jinja nests ``and`` to the left)."""
    if isinstance(test, nodes.And):
        return [*_conjuncts(test.left), *_conjuncts(test.right)]
    return [test]


def _place_arithmetic(node: nodes.Node, sequence: str) -> bool:
    """Whether ``node`` is an integer sum or difference of ``loop.index0``, ``loop.index``,
    ``seq|length`` and integer constants (it cannot fail)."""
    if isinstance(node, nodes.Const):
        return type(node.value) is int
    if loop_attr(node) in PLACE_SHIFTS:
        return True
    if isinstance(node, nodes.Filter):
        return (node.name in _LENGTH and isinstance(node.node, nodes.Name) and node.node.name == sequence
                and not node.args and not node.kwargs and node.dyn_args is None and node.dyn_kwargs is None)
    if isinstance(node, (nodes.Add, nodes.Sub)):
        return _place_arithmetic(node.left, sequence) and _place_arithmetic(node.right, sequence)
    if isinstance(node, nodes.Neg):
        return _place_arithmetic(node.node, sequence)
    return False


class _ItemOnly:
    """Checks that expressions read only the iteration's item (``names``: the target and locals
    made from it), and what the flag's ``if`` holds."""

    def __init__(self, env: jinja2.Environment, macros: dict[str, nodes.Macro], names: set[str]) -> None:
        self.env, self.macros, self.names = env, macros, names
        self._closed: set[str] = set()

    def block(self, body: list[nodes.Node], plan: ScanPlan, flips: list[list[nodes.Node]], places: set[str],
              sequence: str) -> None:
        """The statements under the flag: item-only ``if``s and assignments, and one block of
        assignments that sets the flag down (its values may read the place locals too)."""
        if any(_assigns_namespace(node) for node in body):
            if not all(isinstance(node, nodes.Assign) for node in body) or not any(
                    _sets_flag_down(node, plan) for node in body):
                raise _Refused
            for node in body:
                assert isinstance(node, nodes.Assign)
                if isinstance(node.target, nodes.NSRef):
                    if node.target.name != plan.namespace:
                        raise _Refused
                elif not isinstance(node.target, nodes.Name):
                    raise _Refused
                self.value(node.node, places, sequence)
            flips.append(body)
            return
        for node in body:
            if isinstance(node, nodes.Assign) and isinstance(node.target, nodes.Name):
                self.expression(node.node)
                self.names.add(node.target.name)
            elif isinstance(node, nodes.If):
                self.expression(node.test)
                self.block(node.body, plan, flips, places, sequence)
                for branch in node.elif_:
                    self.expression(branch.test)
                    self.block(branch.body, plan, flips, places, sequence)
                self.block(node.else_, plan, flips, places, sequence)
            else:
                raise _Refused

    def value(self, node: nodes.Node, places: set[str], sequence: str) -> None:
        """A value the flip assigns: item-only, or made of place locals and place arithmetic."""
        if isinstance(node, nodes.Name) and node.name in places or _place_arithmetic(node, sequence):
            return
        self.expression(node)

    def expression(self, node: nodes.Node) -> None:
        if not isinstance(node, _ITEM_NODES):
            raise _Refused
        if isinstance(node, nodes.Name):
            if node.name not in self.names:
                raise _Refused
            return
        if isinstance(node, nodes.Call):
            callee = node.node
            if isinstance(callee, nodes.Name):
                if callee.name in self.macros:
                    self._closed_macro(self.macros[callee.name])
                elif callee.name not in PURE_CALLS:  # (a raise depends on the item alone)
                    raise _Refused
                children = [*node.args, *node.kwargs]
            elif isinstance(callee, nodes.Getattr) and callee.attr not in _MUTATORS:
                children = [callee.node, *node.args, *node.kwargs]
            else:
                raise _Refused
            if node.dyn_args is not None or node.dyn_kwargs is not None:
                raise _Refused
            for child in children:
                self.expression(child)
            return
        if isinstance(node, (nodes.Filter, nodes.Test)) and not pure_filter_or_test(self.env, node):
            raise _Refused
        for child in node.iter_child_nodes():
            self.expression(child)

    def _closed_macro(self, macro: nodes.Macro) -> None:
        """A macro that reads nothing but its parameters, what it binds itself and pure callables,
        and assigns no namespace attribute: its answer depends on its arguments alone."""
        if macro.name in self._closed:
            return
        self._closed.add(macro.name)
        own = {arg.name for arg in macro.args} | {"loop"}
        own |= {name.name for name in macro.find_all(nodes.Name) if name.ctx in ("store", "param")}
        for node in macro.find_all(nodes.Node):
            if self._changes_or_reads_outside(node, own):
                raise _Refused
            if isinstance(node, nodes.Name) and node.name in self.macros and node.name not in own:
                self._closed_macro(self.macros[node.name])

    def _changes_or_reads_outside(self, node: nodes.Node, own: set[str]) -> bool:
        """Whether ``node`` (in a macro binding ``own``) assigns a namespace attribute, defines a
        macro or a call block, changes what it calls a method on, runs an impure filter, or reads a
        name that is not its own, a macro's or a pure callable's."""
        if isinstance(node, (nodes.NSRef, nodes.Macro, nodes.CallBlock, nodes.FilterBlock)):
            return True
        if isinstance(node, nodes.Name):
            return node.ctx == "load" and node.name not in own | self.macros.keys() | PURE_CALLS
        if isinstance(node, nodes.Call):
            return isinstance(node.node, nodes.Getattr) and node.node.attr in _MUTATORS
        if isinstance(node, (nodes.Filter, nodes.Test)):
            return not pure_filter_or_test(self.env, node)
        return False


def _assigns_namespace(node: nodes.Node) -> bool:
    return any(True for _ in node.find_all(nodes.NSRef)) or isinstance(node, nodes.NSRef)


def _sets_flag_down(node: nodes.Node, plan: ScanPlan) -> bool:
    return (isinstance(node, nodes.Assign) and isinstance(node.target, nodes.NSRef)
            and node.target.name == plan.namespace and node.target.attr == plan.flag
            and isinstance(node.node, nodes.Const) and node.node.value is False)


# ------------------------------------------------------------------------------ the rewrite


def _rewrite(env: jinja2.Environment, loop: nodes.For, parent: list[nodes.Node], at: int, sequence: str,
             plan: ScanPlan) -> None:
    """``loop`` made to run over ``__tw_scan.running`` (its places in ``__tw_scan.index``), with a
    call to ``__tw_scan_enter`` before it and one to ``__tw_scan_flip`` where the flag goes down."""
    line = loop.lineno
    enter = nodes.Output([nodes.Call(nodes.Name(_SCAN_ENTER, "load"),
                                     [nodes.Name(sequence, "load"),
                                      nodes.Getattr(nodes.Name(plan.namespace, "load"), plan.flag, "load")],
                                     [], None, None)])
    loop.iter = nodes.Getattr(nodes.Name(_SCAN, "load"), "running", "load")
    loop.body = [_Places().visit(node) for node in loop.body]
    flag_if = loop.body[-1]
    assert isinstance(flag_if, nodes.If)
    for block in _blocks(flag_if):
        if any(_sets_flag_down(node, plan) for node in block):
            block.insert(0, nodes.Output([nodes.Call(nodes.Name(_SCAN_FLIP, "load"), [_index0()], [], None, None)]))
    for node in (enter, loop):
        node.set_lineno(line)
        node.set_environment(env)
    parent.insert(at, enter)


def _blocks(node: nodes.If) -> list[list[nodes.Node]]:
    """Every statement list under ``node`` (its bodies and those of the ``if``s in them)."""
    found = [node.body, *(branch.body for branch in node.elif_), node.else_]
    for block in list(found):
        for child in block:
            if isinstance(child, nodes.If):
                found += _blocks(child)
    return found


def _index0() -> nodes.Expr:
    """``__tw_scan.index[loop.index0]``: the iteration's ``loop.index0`` in the whole walk."""
    return nodes.Getitem(nodes.Getattr(nodes.Name(_SCAN, "load"), "index", "load"),
                         nodes.Getattr(nodes.Name("loop", "load"), "index0", "load"), "load")


class _Places(NodeTransformer):
    """``loop.index0`` and ``loop.index`` as the whole walk reads them."""

    def visit_Getattr(self, node: nodes.Getattr) -> nodes.Node:
        attr = loop_attr(node)
        if attr is None:
            return self.generic_visit(node)
        return _index0() if attr == "index0" else nodes.Add(_index0(), nodes.Const(1))
