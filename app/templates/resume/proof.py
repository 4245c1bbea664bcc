"""The static proof that a template's main loop may be resumed (the rules: ``app.templates.resume``).

``plan_of(env, source)`` gives the template's ``LoopPlan`` — the template compiled again with
calls around and inside its main loop (``__tw_loop_enter`` and the rest, which ``render`` supplies)
and what the run-time check needs: the sequence's name, how far an iteration reads behind and
ahead, the fixed items, the captured names and their guards — or raises ``NotProven`` with the
reason. Nothing of the template is run."""

from __future__ import annotations

from dataclasses import dataclass

import jinja2
from jinja2 import nodes
from jinja2.visitor import NodeTransformer

from app.templates.resume.guards import Guards, _guards
from app.templates.resume.purity import _MUTATORS, PLACE_SHIFTS, PURE_CALLS, _names, loop_attr, pure_filter_or_test
from app.templates.resume.scan import ScanPlan, scan_of

_ENTER, _STATE, _LEAVE, _AT = "__tw_loop_enter", "__tw_loop", "__tw_loop_leave", "__tw_loop_at"
#: main-loop ``loop`` attributes a body may read, and how far behind and ahead each looks
_LOOP_ATTRS = {"index0": (0, 0), "index": (0, 0), "first": (0, 0), "previtem": (1, 0), "last": (0, 1),
               "nextitem": (0, 1)}
_FORBIDDEN = (nodes.Extends, nodes.Include, nodes.Import, nodes.FromImport, nodes.Block)
#: statement and expression nodes a loop body may hold (anything else fails the proof)
_ALLOWED = (nodes.Output, nodes.TemplateData, nodes.If, nodes.For, nodes.Assign, nodes.AssignBlock, nodes.Continue,
            nodes.Scope,
            nodes.Const, nodes.Name, nodes.Getattr, nodes.Getitem, nodes.Slice, nodes.Call, nodes.Filter, nodes.Test,
            nodes.CondExpr, nodes.And, nodes.Or, nodes.Not, nodes.Compare, nodes.Operand, nodes.BinExpr,
            nodes.UnaryExpr, nodes.Concat, nodes.List, nodes.Tuple, nodes.Dict, nodes.Pair, nodes.Keyword)


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
    scan: ScanPlan | None = None  # the reverse scan before the loop, run only where it can change (``scan``)


# ------------------------------------------------------------------------------ the proof


def plan_of(env: jinja2.Environment, source: str) -> LoopPlan:
    """The template's resumable form, or ``NotProven`` (see ``app.templates.resume``)."""
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
        scan = scan_of(env, main, parent, macros)
        template = _resumable(env, ast, main, parent, captured)
        return LoopPlan(template, sequence, walk.ahead, walk.fixed, captured, guards, walk.behind, scan)
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
        attr = loop_attr(node)
        if attr is not None and not inner_loop:
            if in_macro or attr not in _LOOP_ATTRS:
                raise NotProven(f"the loop body reads loop.{attr}")
            behind, ahead = _LOOP_ATTRS[attr]
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
        elif isinstance(node, (nodes.Filter, nodes.Test)) and not pure_filter_or_test(self.env, node):
            raise NotProven(f"{'filter' if isinstance(node, nodes.Filter) else 'test'} {node.name!r} in the loop body")
        for child in node.iter_child_nodes():
            self.expression(child, inner_loop, in_macro)

    def _call(self, node: nodes.Call, inner_loop: bool, in_macro: bool) -> None:
        callee = node.node
        if isinstance(callee, nodes.Name):
            if callee.name in self.macros:
                self.callables.add(callee.name)
                self._macro(self.macros[callee.name])
                return
            if callee.name in PURE_CALLS and callee.name not in self.bound:
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


def _relative_index(arg: nodes.Node, inner_loop: bool) -> int | None:
    """``k`` for ``loop.index0 + k`` (``loop.index`` counts one more; ``-`` gives a negative k)."""
    if inner_loop:
        return None

    def base(node: nodes.Node) -> int | None:
        attr = loop_attr(node)
        return PLACE_SHIFTS.get(attr) if attr is not None else None

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
    # the loop runs over the iterations not taken from the render before (``__tw_loop.running``); its
    # body reads ``loop`` as a loop over the whole sequence would
    main.iter = _state("running")
    shift = _Sparse(sequence)
    main.body = [nodes.Output([_state("mark")]), *(shift.visit(node) for node in main.body)]
    main.set_lineno(line)
    main.set_environment(env)
    at = next(i for i, node in enumerate(parent) if node is main)
    parent[at:at + 1] = [enter, main, call(_LEAVE)]
    return env.template_class.from_code(env, env.compile(ast), env.make_globals(None), None)


def _state(name: str) -> nodes.Expr:
    """``__tw_loop.<name>``: what ``render`` says of the iterations that run (a plain dict; see
    ``render._Run``)."""
    return nodes.Getattr(nodes.Name(_STATE, "load"), name, "load")


def _loop(attr: str) -> nodes.Expr:
    return nodes.Getattr(nodes.Name("loop", "load"), attr, "load")


def _of_run(name: str) -> nodes.Expr:
    """``__tw_loop.<name>[loop.index0]``: what ``render`` says of the iteration under way."""
    return nodes.Getitem(_state(name), _loop("index0"), "load")


class _Sparse(NodeTransformer):
    """The main loop's body, rewritten for a loop over some of the sequence's items (the
    iterations that run, ``__tw_loop.running``, in order): every read of the main loop's ``loop``
    (the proof allows ``index0``, ``index``, ``first``, ``last``, ``previtem`` and ``nextitem``
    only) says what it says in a loop over the whole sequence, from what ``render`` says of each
    iteration that runs — its place (``index``), whether the one before it in the sequence runs
    just before it (``follows``) and the one after just after (``leads``) — and of the loop
    (``tail``: the sequence's last item runs). Nested loops' bodies and filters are left alone
    (there ``loop`` is theirs); their ``else`` is not."""

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
        if loop_attr(node) is None:
            return self.generic_visit(node)
        place = _of_run("index")
        sequence = nodes.Name(self.sequence, "load")
        if node.attr == "index0":
            return place
        if node.attr == "index":
            return nodes.Add(place, nodes.Const(1))
        if node.attr == "first":
            return nodes.Compare(place, [nodes.Operand("eq", nodes.Const(0))])
        if node.attr == "last":  # the last that runs, when it is the sequence's last
            return nodes.And(_loop("last"), _state("tail"))
        if node.attr == "previtem":  # the loop's own when the one before ran just before (or there is none)
            return nodes.CondExpr(_of_run("follows"), _loop("previtem"),
                                  nodes.Getitem(sequence, nodes.Sub(place, nodes.Const(1)), "load"))
        if node.attr == "nextitem":  # the loop's own when the one after runs just after (or there is none)
            return nodes.CondExpr(_of_run("leads"), _loop("nextitem"),
                                  nodes.Getitem(sequence, nodes.Add(place, nodes.Const(1)), "load"))
        raise NotProven(f"the loop body reads loop.{node.attr}")  # the proof refused it already
