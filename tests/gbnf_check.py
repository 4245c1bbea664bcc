"""A small GBNF recognizer for tests: does a grammar accept a string?

Supports what our generated grammars use: rules, alternation, sequences, string literals with
escapes, character classes (negated, ranges, escapes), groups, ``* + ?`` and ``{m}``/``{m,}``/
``{m,n}``. Matching computes the set of end positions reachable from a start position (memoized
per rule and position), so ambiguity and backtracking are handled exactly.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache

_ESC = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "]": "]", "[": "[", "-": "-", "^": "^", "/": "/"}


@dataclass(frozen=True)
class Lit:
    text: str


@dataclass(frozen=True)
class Cls:
    ranges: tuple[tuple[str, str], ...]
    negated: bool


@dataclass(frozen=True)
class Ref:
    name: str


@dataclass(frozen=True)
class Seq:
    items: tuple


@dataclass(frozen=True)
class Alt:
    options: tuple


@dataclass(frozen=True)
class Rep:
    item: object
    low: int
    high: int | None


class _Parser:
    def __init__(self, text: str) -> None:
        self.s = text
        self.i = 0

    def ws(self) -> None:
        while self.i < len(self.s) and self.s[self.i] in " \t":
            self.i += 1

    def escape(self) -> str:
        ch = self.s[self.i]
        self.i += 1
        if ch == "x":
            value = chr(int(self.s[self.i:self.i + 2], 16))
            self.i += 2
            return value
        if ch == "u":
            value = chr(int(self.s[self.i:self.i + 4], 16))
            self.i += 4
            return value
        return _ESC.get(ch, ch)

    def alternation(self) -> object:
        options = [self.sequence()]
        self.ws()
        while self.i < len(self.s) and self.s[self.i] == "|":
            self.i += 1
            options.append(self.sequence())
            self.ws()
        return options[0] if len(options) == 1 else Alt(tuple(options))

    def sequence(self) -> object:
        items = []
        while True:
            self.ws()
            if self.i >= len(self.s) or self.s[self.i] in "|)":
                break
            items.append(self.postfix(self.atom()))
        return items[0] if len(items) == 1 else Seq(tuple(items))

    def atom(self) -> object:
        ch = self.s[self.i]
        if ch == '"':
            self.i += 1
            out = []
            while self.s[self.i] != '"':
                if self.s[self.i] == "\\":
                    self.i += 1
                    out.append(self.escape())
                else:
                    out.append(self.s[self.i])
                    self.i += 1
            self.i += 1
            return Lit("".join(out))
        if ch == "[":
            self.i += 1
            negated = self.s[self.i] == "^"
            if negated:
                self.i += 1
            ranges = []
            while self.s[self.i] != "]":
                lo = self._class_char()
                if self.s[self.i] == "-" and self.s[self.i + 1] != "]":
                    self.i += 1
                    hi = self._class_char()
                else:
                    hi = lo
                ranges.append((lo, hi))
            self.i += 1
            return Cls(tuple(ranges), negated)
        if ch == "(":
            self.i += 1
            inner = self.alternation()
            self.ws()
            assert self.s[self.i] == ")", self.s[self.i:self.i + 20]
            self.i += 1
            return inner
        match = re.compile(r"[a-zA-Z0-9-]+").match(self.s, self.i)
        assert match, f"unexpected {self.s[self.i:self.i + 20]!r}"
        self.i = match.end()
        return Ref(match.group())

    def _class_char(self) -> str:
        ch = self.s[self.i]
        self.i += 1
        if ch == "\\":
            return self.escape()
        return ch

    def postfix(self, item: object) -> object:
        while self.i < len(self.s):
            ch = self.s[self.i]
            if ch == "*":
                item, self.i = Rep(item, 0, None), self.i + 1
            elif ch == "+":
                item, self.i = Rep(item, 1, None), self.i + 1
            elif ch == "?":
                item, self.i = Rep(item, 0, 1), self.i + 1
            elif ch == "{":
                end = self.s.index("}", self.i)
                body = self.s[self.i + 1:end]
                self.i = end + 1
                if "," in body:
                    lo, hi = body.split(",")
                    item = Rep(item, int(lo or 0), int(hi) if hi.strip() else None)
                else:
                    item = Rep(item, int(body), int(body))
            else:
                break
        return item


def parse_grammar(text: str) -> dict[str, object]:
    rules: dict[str, object] = {}
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        name, _, body = line.partition("::=")
        parser = _Parser(body.strip())
        rules[name.strip()] = parser.alternation()
        assert parser.i == len(parser.s), f"trailing text in rule {name}: {parser.s[parser.i:]!r}"
    return rules


def accepts(grammar: str, text: str, start: str = "root") -> bool:
    rules = parse_grammar(grammar)

    @cache
    def rule_ends(name: str, pos: int) -> frozenset[int]:
        return frozenset(ends(rules[name], pos))

    def ends(node: object, pos: int) -> set[int]:
        if isinstance(node, Lit):
            return {pos + len(node.text)} if text.startswith(node.text, pos) else set()
        if isinstance(node, Cls):
            if pos >= len(text):
                return set()
            ch = text[pos]
            inside = any(lo <= ch <= hi for lo, hi in node.ranges)
            return {pos + 1} if inside != node.negated else set()
        if isinstance(node, Ref):
            return set(rule_ends(node.name, pos))
        if isinstance(node, Seq):
            frontier = {pos}
            for item in node.items:
                frontier = {e for p in frontier for e in ends(item, p)}
                if not frontier:
                    break
            return frontier
        if isinstance(node, Alt):
            return {e for option in node.options for e in ends(option, pos)}
        if isinstance(node, Rep):
            result = {pos} if node.low == 0 else set()
            frontier = {pos}
            count = 0
            seen: set[int] = set()
            while frontier and (node.high is None or count < node.high):
                frontier = {e for p in frontier for e in ends(node.item, p)} - (seen if count >= node.low else set())
                count += 1
                if count >= node.low:
                    result |= frontier
                    seen |= frontier
            return result
        raise TypeError(node)

    return len(text) in rule_ends(start, 0)
