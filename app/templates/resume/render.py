"""The continued render at run time (``render_resumable``).

A render with a ``LoopPlan``'s template takes from the earlier render's ``RenderState``
(``Resume.previous``) the loop iterations whose items and captured values (or guards) are the
same, runs the others, and cuts the output apart at ``SEPARATOR``; it leaves its own state in
``Resume.state`` and gives the prompt with its JSON encoding (``JsonText``) — or ``None`` when the
output could not be taken apart (render whole instead)."""

from __future__ import annotations

import secrets
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from itertools import accumulate, compress, repeat
from operator import eq, is_not, not_
from typing import Any

import orjson

from app.jsontext import JsonText
from app.templates.fastrender import render
from app.templates.resume.exact import _Inexact, _item_bytes, exact_bytes, same_places
from app.templates.resume.guards import Outcome, same_outcome
from app.templates.resume.proof import _AT, _ENTER, _LEAVE, _STATE, LoopPlan
from app.templates.resume.scan import _SCAN, _SCAN_ENTER, _SCAN_FLIP

#: separates the loop's iterations in a resumable render's raw output; random per process, so no
#: client can put it in a message on purpose (and by chance, a count mismatch catches it)
SEPARATOR = f"\x00tw-loop-{secrets.token_hex(12)}\x00"


@dataclass(eq=False)
class RenderState:
    """What one resumable render leaves for the next render of the same conversation: the text of
    each loop iteration (``texts``) and the prompt's JSON encoding (``texts_json``), in which the
    texts' encodings stand one after the other from ``texts_json_start`` (text ``i`` ending
    ``texts_json_ends[i]`` bytes after it), each loop item serialised exactly (``items``), the
    value of each captured name serialised (``captured``) and the values themselves (``values``, for
    replaying guards; ``None`` when they could not be kept), and, when the loop ran over the
    messages themselves, the caller's messages (``source``: recognised again by identity, the
    caller having promised never to change them) and each as prepared for the template
    (``prepared``), and what the caller made them of (``derived``). ``size`` is what it counts
    against a byte bound (``sys.getsizeof`` of the texts, the serialised bytes, three times those
    of the items, and what ``derived`` holds)."""

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
    #: where the texts' encodings start in ``texts_json`` (after the encoded text before the loop)
    texts_json_start: int = 0
    #: the place where the reverse scan's flag went down (``app.templates.resume.scan``); ``-1``: it
    #: was up when the scan began and stayed up; ``None``: not known (no scan, or its flag was down)
    flip: int | None = None
    #: what the caller made the messages of, for its next render (``app.templates.prompt.Derived``:
    #: never read here; counted in ``size`` by whoever sets it)
    derived: Any = None

    def __getstate__(self) -> dict[str, Any]:
        """Pickled (from a worker) without what only this process can vouch for — the caller's
        messages (identity means nothing elsewhere), the captured values (namespaces and the like
        need not pickle) — nor the prepared messages (prepared again here if needed: cheaper
        than pickling them both ways)."""
        state = dict(self.__dict__)
        state["source"] = state["values"] = state["prepared"] = state["derived"] = None
        return state


class Resume:
    """One render's link to the conversation it continues: ``previous`` is the state of an earlier
    render of it (``None``: none), ``state`` the state this render leaves (``None``: nothing to
    keep — the template is not resumable, or the render read the sequence from its end),
    ``reused`` how many of its loop iterations were taken from ``previous`` and ``scanned`` how
    many iterations its reverse scan ran (``app.templates.resume.scan``; 0: none ran)."""

    __slots__ = ("previous", "reused", "scanned", "state")

    def __init__(self, previous: RenderState | None = None) -> None:
        self.previous = previous
        self.state: RenderState | None = None
        self.reused = 0
        self.scanned = 0


#: guard outcomes worked out in one go at most (a replay beyond is not tried: rendered instead)
MAX_REPLAY = 4096

#: the bytes of loop items (their exact encodings) a render under way may run (``bounded``)
_BOUND: ContextVar[int | None] = ContextVar("render_bound", default=None)


class RenderTooLarge(Exception):
    """A bounded render would run more of its loop than its bound allows: it could not continue the
    render before it (nothing to continue, captured values changed beyond its guards, items that
    cannot be compared) — the caller renders it elsewhere."""


@contextmanager
def bounded(limit: int) -> Iterator[None]:
    """Renders in this context run at most ``limit`` bytes of loop items (the items' exact
    encodings), or raise ``RenderTooLarge`` before running any — also where a render would fall
    back to rendering whole. (An event loop continues a long conversation's render itself, but never
    renders it whole.)"""
    token = _BOUND.set(limit)
    try:
        yield
    finally:
        _BOUND.reset(token)


def render_bound() -> int | None:
    """The bound of the renders under way (``bounded``), or ``None``."""
    return _BOUND.get()


class _Whole:
    """``what[i]`` for every ``i``: the iterations of a loop run over the whole sequence (each at its
    own place, each after the one before)."""

    __slots__ = ("what",)

    def __init__(self, what: Any) -> None:
        self.what = what

    def __getitem__(self, i: int) -> Any:
        return i if self.what is None else self.what


class _Run:
    """One resumable render's state: what the calls the template makes do. ``state`` is what the
    loop reads (``__tw_loop``): the mark each iteration writes first, the items of the iterations
    that run (``running``), for each its place in the sequence (``index``) and whether the item
    before it and the one after it run next to it (``follows``, ``leads``), and whether the
    sequence's last item runs (``tail``) — until ``enter`` knows better, the whole sequence."""

    def __init__(self, plan: LoopPlan, resume: Resume, messages: list[Any], items: list[bytes] | None,
                 equal: list[bool] | None, source: list[Any] | None) -> None:
        self.plan, self.resume, self.messages = plan, resume, messages
        self.state: dict[str, Any] = {"mark": SEPARATOR, "running": (), "index": _Whole(None), "follows": _Whole(True),
                                      "leads": _Whole(True), "tail": True}
        self.entered = self.left = False
        self.length = 0  # items the loop runs over
        self.items, self.equal, self.source = items, equal, source  # the loop's items, when it runs over the messages
        self.captured: list[bytes] = []
        self.values: list[Any] | None = None
        self.outcomes: list[Outcome] = []
        self.run: list[int] = []  # the places of the iterations that run, in order (the others: the render before's)
        self.storable = False
        self.wrapped = False  # an iteration read the sequence from its end
        # the reverse scan's iterations that run (``running``, their places in the whole walk
        # ``index``; ``app.templates.resume.scan``), and where its flag went down
        self.scan: dict[str, Any] = {"running": (), "index": _Whole(None)}
        self.scan_length = 0
        self.flip: int | None = None

    def functions(self) -> dict[str, Any]:
        return {_ENTER: self.enter, _STATE: self.state, _LEAVE: self.leave, _AT: self.at, _SCAN: self.scan,
                _SCAN_ENTER: self.scan_enter, _SCAN_FLIP: self.scan_flip}

    def scan_enter(self, sequence: Any, flag: Any) -> str:
        """The reverse scan's start: the whole walk, or — its flag up now and when the render before
        scanned, over the caller's messages — only the places that can answer differently
        (``_scan_places``)."""
        if not isinstance(sequence, list):
            self.scan.update(running=self.plan.template.environment.getitem(sequence, slice(None, None, -1)),
                             index=_Whole(None))
            return ""
        n = self.scan_length = len(sequence)
        up = bool(flag)
        self.flip = -1 if up else None
        places = self._scan_places(n) if up and sequence is self.messages else None
        if places is None:
            self.scan.update(running=sequence[::-1], index=_Whole(None))
            self.resume.scanned = n
        else:
            self.scan.update(running=[sequence[p] for p in places], index=[n - 1 - p for p in places])
            self.resume.scanned = len(places)
        return ""

    def _scan_places(self, n: int) -> list[int] | None:
        """The places the scan runs, newest first: those after the render before's flip whose items
        are new or changed, then the flip's own (every place up to it, when its item changed);
        ``None``: the whole walk (nothing known to go by)."""
        previous, equal = self.resume.previous, self.equal
        if previous is None or previous.flip is None or equal is None or previous.flip >= n:
            return None
        flip = previous.flip
        changed = [*compress(range(len(equal)), map(not_, equal)), *range(len(previous.items), n)]
        after = [p for p in changed if p > flip]
        if flip < 0:
            return after[::-1]
        return [*after[::-1], *([flip] if flip < len(equal) and equal[flip] else range(flip, -1, -1))]

    def scan_flip(self, index0: int) -> str:
        """The scan's flag goes down at ``index0`` of the whole walk."""
        if self.flip == -1:
            self.flip = self.scan_length - 1 - index0
        return ""

    def at(self, sequence: Any, index: Any) -> Any:
        """``sequence[index]`` as the template reads it; an index that counts from the end makes the
        iteration depend on the last items, so the render is not kept."""
        if isinstance(index, int) and index < 0:
            self.storable = False
            self.wrapped = True
        return self.plan.template.environment.getitem(sequence, index)

    def enter(self, sequence: Any, captured: list[Any]) -> str:
        self.entered = True
        self.state["running"] = sequence
        if not isinstance(sequence, list):
            return self._within_bound(None)
        self.length = len(sequence)
        self.run = list(range(self.length))
        previous = self.resume.previous
        try:
            self.captured = [exact_bytes(value) for value in captured]
            if sequence is not self.messages:  # a list the template made: its own items are serialised
                self.items = [b"j" + exact_bytes(item) for item in sequence]
                self.source = None
                self.equal = same_places(previous.items, self.items) if previous is not None else None
            self.storable = self.items is not None and not self.wrapped
        except _Inexact:
            return self._within_bound(None)
        self.values = captured
        if previous is not None and self.equal is not None:
            reusable = self._reusable(previous, self.equal)
            if any(reusable):
                self._runs([i for i, taken in enumerate(reusable) if not taken] + self.run[len(reusable):], sequence)
        return self._within_bound(self.items)  # the reused texts go back in when the output is taken apart

    def _within_bound(self, items: list[bytes] | None) -> str:
        """The loop's start; ``RenderTooLarge`` where the iterations to run (``items``' bytes at
        their places; ``None``: not known) pass the bound of a ``bounded`` render."""
        limit = _BOUND.get()
        if limit is not None and (items is None or sum(len(items[i]) for i in self.run) > limit):
            raise RenderTooLarge(f"the loop would run {len(self.run)} of {self.length} iterations")
        return SEPARATOR

    def _runs(self, run: list[int], sequence: list[Any]) -> None:
        """Run only the iterations at the places ``run`` (ascending); the others are taken."""
        self.run = run
        last = self.length - 1
        self.state.update(running=[sequence[i] for i in run], index=run,
                          follows=[k == 0 and i == 0 or k > 0 and run[k - 1] == i - 1 for k, i in enumerate(run)],
                          leads=[i == last if k == len(run) - 1 else run[k + 1] == i + 1 for k, i in enumerate(run)],
                          tail=bool(run) and run[-1] == last)

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
        # iteration i reads the places from i - behind to i + ahead: a window of sames (in C: the
        # count of differing places so far, compared at the window's two ends)
        differ = [0, *accumulate(map(not_, same))]
        behind, ahead = plan.behind, plan.ahead
        starts = [*repeat(0, min(behind, both)), *differ[:max(0, both - behind)]]
        reusable = list(map(eq, differ[ahead + 1:ahead + 1 + both], starts))
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
        changed = frozenset(name for name, was, now in zip(self.plan.captured, previous.captured, self.captured,
                                                           strict=True) if was != now)
        if not changed <= guards.names:
            return []
        values = self.values or []
        places = guards.places(previous.values, values, self.plan.captured, changed,
                               (len(previous.items), self.length), upto)
        if places is not None:  # only these iterations' guards can come out differently: evaluated there alone
            was = guards.outcomes(previous.values, self.plan.captured, places, len(previous.items))
            now = guards.outcomes(values, self.plan.captured, places, self.length)
            if was is None or now is None:
                return []
            agreed = reusable[:upto]
            for i, before, after in zip(places, was, now, strict=True):
                agreed[i] = agreed[i] and same_outcome(before, after)
            return agreed
        old = previous.outcomes
        if len(old) < upto:
            more = guards.outcomes(previous.values, self.plan.captured, range(len(old), upto), len(previous.items))
            if more is None:
                return []
            old = previous.outcomes = [*old, *more]
        new = guards.outcomes(values, self.plan.captured, range(upto), self.length)
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
        run = self.run
        if not self.left or len(parts) != len(run) + 3:
            return None
        head, _, *fresh, tail = parts
        previous = self.resume.previous
        texts = previous.texts[:self.length] if previous is not None and len(run) < self.length else []
        for i, text in zip(run, fresh, strict=True):  # ascending: past the earlier render's, each is the next
            if i < len(texts):
                texts[i] = text
            else:
                texts.append(text)
        self.resume.reused = self.length - len(run)
        prompt = "".join([head, *texts, tail])
        try:
            encoded, ends = self._encoded(texts)
            around = (orjson.dumps(head)[:-1], orjson.dumps(tail)[1:])
        except orjson.JSONEncodeError:  # not UTF-8 encodable (a lone surrogate): the body will say so
            return prompt
        encoding = b"".join([around[0], *encoded, around[1]])  # (the taken stretches are views: one copy)
        if self.storable and self.items is not None and len(self.items) == self.length:
            size = (sum(map(sys.getsizeof, texts)) + len(encoding) + 3 * sum(map(len, self.items))
                    + 56 * len(self.items) + sum(map(len, self.captured)))
            prepared = self.messages if self.plan.sequence == "messages" else None
            self.resume.state = RenderState(texts, encoding, ends, self.items, self.captured, self.values,
                                            self.source, prepared, size, self.outcomes, len(around[0]), self.flip)
        return JsonText(prompt, encoding)

    def _encoded(self, texts: list[str]) -> tuple[list[bytes | memoryview], list[int]]:
        """Each text's JSON encoding (without its quotes) and where each ends, one after the other:
        the texts taken from the render before bring their encodings along, a stretch at a time
        (a view of the render before's, not a copy)."""
        previous = self.resume.previous
        old = memoryview(previous.texts_json)[previous.texts_json_start:] if previous is not None else memoryview(b"")
        old_ends = previous.texts_json_ends if previous is not None else []
        encoded: list[bytes | memoryview] = []
        ends: list[int] = []
        size = at = 0  # bytes so far; the first place not yet encoded
        for i in [*self.run, len(texts)]:
            if i > at:  # places ``at`` to ``i`` were taken: their encodings, as one slice
                begin = old_ends[at - 1] if at else 0
                encoded.append(old[begin:old_ends[i - 1]])
                shift = size - begin
                ends.extend(old_ends[at:i] if not shift else [end + shift for end in old_ends[at:i]])
                size = ends[-1]
            if i < len(texts):
                piece = orjson.dumps(texts[i])[1:-1]
                encoded.append(piece)
                size += len(piece)
                ends.append(size)
            at = i + 1
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
        try:  # a message handed over again (the same object) has the bytes it had: found in C
            n = min(len(same), len(messages))
            items = list(previous.items[:n]) if previous is not None else []
            for i in compress(range(n), map(is_not, same, messages)):
                items[i] = _item_bytes(messages[i])
            items[n:] = map(_item_bytes, messages[n:])
        except _Inexact:
            items = None
        if items is not None and previous is not None:
            equal = same_places(previous.items, items)
            old = previous.prepared
            if old is not None and any(equal):  # a message prepared before is the same prepared again
                fresh = [*compress(range(len(equal)), map(not_, equal)), *range(len(equal), len(messages))]
                prepared = list(old[:len(messages)])
                prepared[len(old):] = repeat(None, len(messages) - len(old))
                for i, made in zip(fresh, prepare(list(map(messages.__getitem__, fresh))), strict=True):
                    prepared[i] = made
            for i in compress(range(len(equal)), equal):
                items[i] = previous.items[i]  # the same bytes: kept once
    if prepared is None:
        prepared = prepare(messages)
    owned(prepared)  # the sandbox keeps the template from changing them (they may be reused)
    run = _Run(plan, resume, prepared, items, equal,
               list(messages) if frozen and plan.sequence == "messages" else None)
    raw = render(plan.template, {**context, "messages": prepared, **run.functions()})
    return run.finish(raw)
