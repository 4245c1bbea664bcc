"""A request body's JSON parsed again only past what an earlier body of its conversation held.

An agent sends its whole conversation every turn — a Chat or Messages body's ``messages``, a
Responses body's ``input`` — so parsing the body costs in proportion to the conversation, where
what is new is a turn's bytes. A ``Layout`` is what one body leaves for the next: the body's bytes
up to the end of the last of its first elements whose compact JSON (as ``orjson`` writes it) the
body holds exactly, back to back with a comma between (most clients write compact JSON — httpx,
``JSON.stringify``, serde), where each of them ends, their JSON, and the elements as parsed.

A body that starts with a layout's bytes up to its ``n``-th element's end (one comparison for all
of them; a binary search over the ends when not all are there) is parsed as the body
with those elements replaced by one string of the process's own (``_SENTINEL``: a random nonce no
client can send): where that string is the first element of the body's list, the list's place in
the body is proven (the parse before it is the same bytes), and the body is that parse with the
string replaced by the layout's ``n`` elements — the same objects, which nothing downstream
changes (a test holds them to a fresh parse). Where the elements differ at one place only — an
element edited in place (an agent's repo map re-sent, an old tool result cleared) — the layout's
elements after it are found again right after the new one (one search for their bytes): the body
is parsed with each of the two runs replaced by the string, the new element between them, which
must be exactly one element in compact JSON. Anything else (the string elsewhere, invalid JSON)
is parsed whole, as without a layout. So a body costs its new bytes plus a comparison of the
bytes in common (``bytes.startswith``: ``memcmp``), and the elements' JSON — the prefix service's
units (``app.prefix.unit``) — is encoded for new elements only.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import orjson

#: the string standing for the elements a layout spares parsing (see the module docstring)
_SENTINEL = "\x00toolwire-elements-" + secrets.token_hex(16)
_SENTINEL_JSON = orjson.dumps(_SENTINEL)
#: bytes an element's JSON can open with for its end to be its own (an object, an array, a string):
#: a number's bytes can be the start of a longer number
_SELF_ENDING = frozenset(b'{["')
#: the first bytes of an element edited in place that ``read`` takes (one of them: ``_SELF_ENDING``)
_OPENINGS = frozenset(bytes([b]) for b in _SELF_ENDING)
#: elements encoded before a body reusing nothing is admitted (its conversation's first ones)
HEAD = 4
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Layout:
    """What a body leaves for the next (see the module docstring): its bytes up to the end of its
    last element known (``raw``), where its list's first element starts (``start``: ``raw[:start]``
    is the head) and where each element known ends (``ends``). ``size``: bytes it holds, about (its
    bytes, its elements' JSON, the elements as parsed about three times, what faces derived)."""

    raw: bytes
    start: int
    ends: list[int]
    jsons: list[bytes]
    items: list[Any]
    size: int
    #: what faces derive from each of ``items`` alone (``Elements.each``), by name
    derived: dict[str, list[Any]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Elements:
    """A body's list as ``read`` found it: each element's compact JSON where it is known (``None``
    where it is not: beyond ``jsons``' length, or where it could not be encoded), how many first
    elements are an earlier body's (``reused``), and the layout this body leaves (``None``: none)."""

    items: list[Any]
    jsons: list[bytes | None]
    reused: int
    layout: Layout | None
    #: the layout the reused elements came from
    base: Layout | None
    #: the one place among the first ``reused`` whose element is the body's own (edited in place)
    replaced: int | None = None

    def json(self, i: int) -> bytes | None:
        """Element ``i``'s compact JSON, where it is known."""
        return self.jsons[i] if i < len(self.jsons) else None

    def each(self, what: str, make: Callable[[Any, bytes | None], T]) -> list[T]:
        """``make(element, its JSON or None)`` for every element — a function of the element alone,
        named ``what`` — where the elements reused take what the body they came from made (a face
        counts an agent's conversation and makes its units every turn). Kept on this body's
        layout for the next."""
        had = self.base.derived.get(what) if self.base is not None else None
        made: list[T] = had[:self.reused] if had is not None else []
        jsons = self.jsons
        at = self.replaced
        if at is not None and at < len(made):
            made[at] = make(self.items[at], jsons[at])
        for i in range(len(made), len(self.items)):
            made.append(make(self.items[i], jsons[i] if i < len(jsons) else None))
        if self.layout is not None:
            self.layout.derived[what] = made[:len(self.layout.items)]
        return made


def each(elements: Elements | None, items: list[Any], what: str,
         make: Callable[[Any, bytes | None], T]) -> Iterable[T]:
    """``make(item, its JSON or None)`` for each of ``items``: ``elements.each`` when they are the
    elements of a body that leaves a layout (or reused one); else drawn one by one as asked (a
    conversation's first sighting draws only its first few)."""
    if elements is None or elements.items is not items:
        return (make(item, None) for item in items)
    if elements.layout is not None or elements.reused:
        return elements.each(what, make)
    json = elements.json
    return (make(item, json(i)) for i, item in enumerate(items))


def as_elements(elements: Elements | None, items: list[Any]) -> list[Any]:
    """``elements.items`` where ``items`` holds the same elements in a list of its own (a request
    model's ``list[Any]`` field: the body's items, the list copied), so that ``each`` reuses what
    was derived from them; else ``items``."""
    if elements is None or len(elements.items) != len(items):
        return items
    known = elements.items
    return known if not items or (items[0] is known[0] and items[-1] is known[-1]) else items


def total(elements: Elements | None, items: list[Any], what: str, measure: Callable[[Any], int]) -> int:
    """The sum of ``measure`` over ``items`` (``each``: the reused elements' counts as they were)."""
    return sum(each(elements, items, what, lambda item, _: measure(item)))


def shared(raw: bytes, layout: Layout) -> tuple[int, int]:
    """How many of ``layout``'s elements ``raw`` holds at their places — the same bytes up to the
    end of the last of them — and where that is (0, 0: none). One comparison when it holds them
    all (an appended turn); else a binary search over the elements' ends."""
    ends = layout.ends
    if raw.startswith(layout.raw):
        return len(ends), ends[-1]
    view = memoryview(layout.raw)
    lo, hi = 0, len(ends) - 1  # the first ``lo`` elements are known to be the same
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if raw.startswith(view[:ends[mid - 1]]):
            lo = mid
        else:
            hi = mid - 1
    return lo, ends[lo - 1] if lo else 0


def read(raw: bytes, key: str, layouts: list[Layout],
         admit: Callable[[list[bytes | None]], bool]) -> tuple[Any, Elements | None]:
    """``raw`` parsed (``orjson.loads``'s answer and errors), reusing the layout of ``layouts`` that
    shares most elements of the list at ``key``; with the list's elements (``None`` when the body
    has no such list). Reusing none, the first ``HEAD`` elements are encoded and ``admit`` is asked
    whether to go on (a conversation's first sighting: no); going on, every element not reused is
    encoded and the body's layout made."""
    best: Layout | None = None
    reused = end = 0
    for layout in layouts:
        n, at = shared(raw, layout)
        if n > reused:
            best, reused, end = layout, n, at
    # an element edited in place: after the run in common — or first, under the same head
    candidates = ([best] if best is not None else
                  [layout for layout in layouts if raw.startswith(memoryview(layout.raw)[:layout.start])])
    for layout in candidates:
        if reused < len(layout.ends) - 1:
            edited = _edited(raw, key, layout, reused, end)
            if edited is not None:
                return edited
    body: Any = None
    if best is not None:
        body, listed = _parsed(raw[:best.start] + _SENTINEL_JSON + raw[end:], key)  # (an error: parsed whole below)
        if listed and listed[0] == _SENTINEL:
            listed[:1] = best.items[:reused]
        else:
            best, reused, body = None, 0, None
    if best is None:
        body = orjson.loads(raw)
    listed = body.get(key) if isinstance(body, dict) else None
    if not isinstance(listed, list):
        return body, None
    jsons: list[bytes | None] = list(best.jsons[:reused]) if best is not None else []
    if best is None:
        _encode(listed, jsons, HEAD)
        if not admit(jsons):
            return body, Elements(listed, jsons, 0, None, None)
    _encode(listed, jsons, len(listed))
    known = (best.start, best.jsons[:reused], best.ends[:reused]) if best is not None else None
    return body, Elements(listed, jsons, reused, _layout(raw, listed, jsons, known), best)


def _edited(raw: bytes, key: str, best: Layout, reused: int, end: int) -> tuple[Any, Elements] | None:
    """``raw`` read as ``best``'s body with its element ``reused`` edited in place — the elements
    before it at their places (up to ``end``), those after it found again right after a new one
    (see the module docstring) — or ``None`` when it is not that."""
    at = best.start if reused == 0 else end + 1  # where the edited element starts
    if reused and raw[end:at] != b",":
        return None
    after = memoryview(best.raw)[best.ends[reused]:]  # "," and the elements after it, as they were
    found = raw.find(after, at + 1)
    if found < 0:
        return None
    data = raw[at:found]
    if data[:1] not in _OPENINGS:
        return None
    parts = [raw[:best.start], _SENTINEL_JSON + b"," if reused else b"", data, b",", _SENTINEL_JSON,
             raw[found + len(after):]]
    body, listed = _parsed(b"".join(parts), key)
    mine = 1 if reused else 0  # where the edited element is in the parse
    if (listed is None or len(listed) < mine + 2 or listed[mine + 1] != _SENTINEL
            or (reused and listed[0] != _SENTINEL) or orjson.dumps(listed[mine]) != data):
        return None  # not one element in compact JSON between the two runs
    count = len(best.ends)
    listed[mine + 1:mine + 2] = best.items[reused + 1:count]
    listed[:mine] = best.items[:reused]
    known = [*best.jsons[:reused], data, *best.jsons[reused + 1:count]]
    jsons: list[bytes | None] = list(known)
    _encode(listed, jsons, len(listed))
    shift = found - best.ends[reused]
    ends = [*best.ends[:reused], at + len(data), *(e + shift for e in best.ends[reused + 1:])]
    layout = _layout(raw, listed, jsons, (best.start, known, ends))
    return body, Elements(listed, jsons, count, layout, best, reused)


def _parsed(data: bytes, key: str) -> tuple[Any, list[Any] | None]:
    """``data`` parsed with its list at ``key`` (``None``: none there), or ``(None, None)`` when it
    is not JSON."""
    try:
        body = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None, None
    listed = body.get(key) if isinstance(body, dict) else None
    return body, listed if isinstance(listed, list) else None


def _encode(items: list[Any], jsons: list[bytes | None], upto: int) -> None:
    """Append the JSON of ``items`` from ``len(jsons)`` to ``upto`` to ``jsons`` (``None`` for one
    that cannot be encoded)."""
    for item in items[len(jsons):upto]:
        try:
            jsons.append(orjson.dumps(item))
        except (orjson.JSONEncodeError, TypeError):
            jsons.append(None)


def _layout(raw: bytes, items: list[Any], jsons: list[bytes | None],
            known_in: tuple[int, list[bytes], list[int]] | None) -> Layout | None:
    """The layout ``raw`` leaves: the list's start, the elements known to be in place and their ends
    (``known_in``: a layout's reused ones), then each element whose JSON ``raw`` holds right after
    the last, a comma between — or, with none known, from the list's place found by its first
    element's JSON (a wrong place is caught when the layout is used)."""
    if known_in is not None:
        start, known, ends = known_in[0], list(known_in[1]), list(known_in[2])
        pos = ends[-1] + 1
        more = raw[pos - 1:pos] == b","
    else:
        first = jsons[0] if jsons else None
        if first is None or first[0] not in _SELF_ENDING:
            return None
        start = raw.find(first)
        if start < 1 or raw[start - 1] != 0x5B:  # "["
            return None
        pos, known, ends, more = start, [], [], True
    for data in jsons[len(known):] if more else ():
        if data is None or data[0] not in _SELF_ENDING or not raw.startswith(data, pos):
            break
        known.append(data)
        pos += len(data)
        ends.append(pos)
        if raw[pos:pos + 1] != b",":
            break
        pos += 1
    if not known:
        return None
    size = 6 * ends[-1] + 64 * len(known)  # (its bytes, the elements' JSON, three times as parsed, derived)
    return Layout(raw[:ends[-1]], start, ends, known, items[:len(known)], size)


__all__ = ["HEAD", "Elements", "Layout", "as_elements", "each", "read", "shared", "total"]
