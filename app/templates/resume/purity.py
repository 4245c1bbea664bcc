"""The Jinja that changes nothing, as the proof (``proof``) and the guard finder (``guards``) both
judge it — and the reverse scan's proof (``scan``) too: the method names that change the list,
dict, set or deque they are called on (``_MUTATORS``), the filters that are not pure
(``_IMPURE_FILTERS``; ``pure_filter_or_test``), the globals a body may call (``PURE_CALLS``), and the
names an expression or assignment target reads (``_names``) — and how both read the loop's place
(``loop_attr``, ``PLACE_SHIFTS``)."""

from __future__ import annotations

import jinja2
from jinja2 import nodes

_IMPURE_FILTERS = frozenset({"random"})
#: globals a body may call: pure, or raising (a raise is not cached: a failed render stores nothing)
PURE_CALLS = frozenset({"range", "dict", "namespace", "raise_exception"})
_MUTATORS: frozenset[str] = frozenset({
    "append", "extend", "insert", "pop", "remove", "clear", "sort", "reverse", "update", "setdefault", "popitem",
    "add", "discard", "difference_update", "intersection_update", "symmetric_difference_update", "appendleft",
    "extendleft", "popleft", "rotate"})


def pure_filter_or_test(env: jinja2.Environment, node: nodes.Filter | nodes.Test) -> bool:
    """Whether ``node`` applies a filter of ``env`` that is pure, or a test of ``env``."""
    if isinstance(node, nodes.Filter):
        return node.name not in _IMPURE_FILTERS and node.name in env.filters
    return node.name in env.tests


#: the main loop's attributes that say an iteration's place, and what each adds to its index
PLACE_SHIFTS = {"index0": 0, "index": 1}


def loop_attr(node: nodes.Node) -> str | None:
    """``attr`` where ``node`` is ``loop.attr`` (the innermost loop's, where it stands), else ``None``."""
    if isinstance(node, nodes.Getattr) and isinstance(node.node, nodes.Name) and node.node.name == "loop":
        return str(node.attr)
    return None


def _names(node: nodes.Node) -> list[nodes.Name]:
    return [node] if isinstance(node, nodes.Name) else list(node.find_all(nodes.Name))
