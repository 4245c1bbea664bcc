"""The prefix service: what an agent's next turn reuses of its last — one owner for every face and
every shape of conversation, owned by the process's services (``app.services``).

An agent sends its whole conversation every turn (or, on the Responses API, names the response it
continues). What the turn before already did for the same conversation need not be done again:
decoding and validating its earlier items into the shared conversation (``app.conversation``),
rendering the chat template's loop over them (``app.templates.resume``), encoding the tool
schemas for the template (``tojson``). This service keeps that work — one ``Entry`` per
conversation as its last request left it — and hands it to the next request of the same tenant.

* **Fed by every face, after it decodes.** A face cuts its request into *units* — its items in
  order (Chat's messages, the Messages API's system and messages, the Responses API's
  instructions and input items) — each as its exact bytes (``orjson``: key order, ``1`` against
  ``1.0`` against ``true`` all told apart; ``None`` for a unit that cannot be reused). ``recall``
  finds the kept entry of the same *scope* (the tenant, the face and whatever else the face's
  decoding reads) that shares the most units with the request at the same places — the **longest
  common prefix** first, and past a unit that differs, the units that are still the same where
  they were: an appended turn, a rewritten last message, an edited early one (a repo map, a
  cleared tool result, a system prompt that carries the time) each reuse all but what changed.
  The face takes the entry's turns for each run of such units (``Recall.take``: up to a place
  where its decoder can resume, as the face said when it kept them) and decodes the rest
  (``Recall.after``); the ``Note`` it makes rides on the ``Ask`` to the pipeline, whose render
  continues the entry's render (``Note.resume``, again item by item and place by place), and is
  kept (``keep``) once the request was planned — never before, so a request refused (limits,
  template) leaves nothing that could spare its successor the checks.
* **Chains.** A finished response the Responses API stored is kept by its id (``keep_response``)
  with the turns its chain decodes to, its output included, so a ``previous_response_id``
  continuation starts from there (``recall_response``) instead of reading and decoding the chain.
* **Stored conversations.** What the Responses API read of a stored conversation's items is kept by
  the conversation's id (``keep_items``) with the store's mark of where the read ended, so the next
  request reads from the store only the items added since (``recall_items``).
* **Tool definitions.** An agent sends the same tools with every request. A face's decoding of
  them — validated, made the tools the model is offered — is kept by the tenant, the face and
  their exact bytes and handed, the same objects, to the next request with those bytes: their
  validation is skipped, and what the pipeline works out from a tool (its schema's check key, the
  size of its JSON: ``Tool.once``) is not worked out again. ``recall`` finds them with the
  conversation (``Recall.tools``) and the note keeps what the face decoded once the request was
  planned — only for a conversation the service has seen before. The Responses API, which reads
  its tools before its conversation, asks ``tools_key`` / ``recall_tools`` / ``keep_tools``
  itself: tools are encoded from their second sighting on (their first notes a digest of their
  names), so a miss never costs more than no service.
* **Request bodies.** Before any of that, the body itself: an agent's body holds its whole
  conversation, parsed (``orjson.loads``) and encoded (the units) again every turn. ``read_body``
  keeps, by tenant, face and the body's first bytes, the layout the last bodies left (``app.bodies``:
  where each element's compact JSON stands, and the elements as parsed) and parses a body past the
  elements it shares with one — the same objects, their JSON its units. Kept from the second
  sighting of a body's first elements, in the budget.
* **A miss is never dearer than no cache.** Finding an entry costs a digest of a few units and a
  comparison of bytes with a few candidates, place by place; what a request leaves is kept after
  the backend was asked, off the way to the first token. A conversation is kept from its second
  sighting on: one with nothing kept under its anchors, none of which was seen before, leaves
  only its anchors (``SEEN_BYTES`` each) and is decoded and rendered as without the service —
  its later units not even encoded (``recall`` is ``None``) — so a one-off conversation (a batch
  of distinct requests) costs what it costs without the service, and the next request of a
  conversation that goes on finds its anchors and is kept. The anchor of the first unit alone
  does not count here: distinct conversations share a system prompt. A conversation too short to
  keep is sighted all the same: an agent's first turn (a system prompt and a task) makes its
  second kept and its third reused.
* **One byte budget.** Entries (their units, and the turns they decode to counted three times by
  their units' bytes — as parsed, as a model, as a turn — and render states), tool definitions,
  ``tojson`` answers and sightings share one least-recently-used bound, ``--prefix-cache-bytes`` for the server, its
  uvicorn workers each holding their share; prepare workers keep nothing (what they render comes
  back to be kept here), so that is the process tree's whole budget. An entry a newer one of the
  same conversation supersedes is dropped at once; conversations of fewer than ``min_units``
  units are neither reused nor kept (only sighted).

A unit's bytes are the face's to choose, and a later face may key a unit by something other than
its literal bytes where that is exact — an image by the digest of its content rather than its
bytes (``unit``'s ``tag`` and value): equal units must always decode alike. Thread-safe.
"""

from __future__ import annotations

import hashlib
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from itertools import compress, islice, repeat
from operator import is_
from typing import Any, cast

import orjson

from app.bodies import Elements, Layout, read
from app.conversation import Turn
from app.media import Media
from app.templates.resume import RenderState, Resume, same_places

#: an entry is filed under the digest of its first 4, 2 and 1 units (most specific first), and
#: under each of the units at these places alone
ANCHORS = (4, 2, 1)
PLACES = (1, 2)
#: entries compared at most per lookup (the most recent of the most specific anchor's)
MAX_PROBES = 4
#: bytes an entry counts per unit beyond its strings (the unit's objects, the turn, the model)
UNIT_OVERHEAD = 200
#: conversations of fewer units are decoded and rendered whole, and not kept: with a few messages
#: the bookkeeping (digests, cut-out iterations) costs more than it saves
MIN_UNITS = 4


#: what a conversation's first sighting leaves per anchor (its digest, its place in the bound), in bytes
SEEN_BYTES = 128
#: the units a sighting is decided on: those ``_anchors`` reads
HEAD = max(ANCHORS[0], max(PLACES) + 1)


#: a unit whose JSON is longer (a large image's base64, a pasted file of hundreds of KB) is kept as
#: its digest; a shorter one is held and compared whole: comparing its bytes costs a tenth of hashing
#: them (a file an agent read, 16 KB of tool result, is compared again every turn), and an entry
#: counts its units whole either way (``keep``)
DIGESTED = 256 << 10
#: bytes of each unit an anchor is made of, and its length: a lookup's digests cost the same
#: whatever the units' sizes (an anchor only finds candidates; their units are compared whole)
ANCHOR_BYTES = 4096
_DIGESTED = b"\x00#"  # (JSON never starts so)
#: a request body's first bytes its layouts are filed under (``read_body``): a model's name, the
#: start of a system prompt — what an agent's bodies share turn after turn
OPENING_BYTES = 1024


def unit(value: Any, tag: bytes = b"", data: bytes | None = None) -> bytes | None:
    """A unit's exact bytes: ``tag`` (at most 16 bytes) and the value's JSON (``orjson``; ``None``
    when it cannot be encoded — never reused) — or, past ``DIGESTED`` bytes, ``tag``, a 32-byte
    BLAKE2b digest of the JSON and its length: a large image's base64 is held and compared as its
    digest, not its bytes. ``data``: the value's JSON, where it is known already (a body's element: ``app.bodies``)."""
    if data is None:
        try:
            data = orjson.dumps(value)
        except (orjson.JSONEncodeError, TypeError):
            return None
    if len(data) <= DIGESTED:
        return tag + data if tag else data
    return tag + _DIGESTED + hashlib.blake2b(data, digest_size=32).digest() + len(data).to_bytes(8, "little")


def unit_bytes(data: bytes) -> int:
    """The bytes of JSON a unit stands for (a digested unit's length, as its last 8 bytes say)."""
    if len(data) < 42 or data[-42:-40] != _DIGESTED:
        return len(data)
    return int.from_bytes(data[-8:], "little")


#: the longest a digested unit is (its tag, the mark, the digest and the length)
_DIGESTED_MOST = 16 + len(_DIGESTED) + 32 + 8


def units_bytes(units: Sequence[bytes]) -> int:
    """``unit_bytes`` summed over ``units`` — in C but for the few short enough to be digested."""
    lengths = list(map(len, units))
    short = compress(units, map(_DIGESTED_MOST.__ge__, lengths))
    return sum(lengths) + sum(unit_bytes(u) - len(u) for u in short)


def scope_of(*parts: str | bytes) -> bytes:
    """A scope: the tenant, the face and what else its decoding depends on, in one digest."""
    digest = hashlib.blake2b(b"toolwire-prefix-scope", digest_size=16)
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        digest.update(len(data).to_bytes(8, "little") + data)
    return digest.digest()


def turn_bytes(turn: Turn) -> int:
    """What a turn holds, in bytes (about): its strings."""
    size = len(turn.text) + len(turn.reasoning or "")
    for part in turn.parts or ():
        size += part.size if isinstance(part, Media) else len(part) if isinstance(part, str) else 256
    for call in turn.calls:
        size += len(call.id) + len(call.name) + (len(call.arguments) if isinstance(call.arguments, str) else 256)
    return size


@dataclass(eq=False, slots=True)
class Entry:
    """One conversation as its last request left it (see the module docstring): its units, the
    turns they decode to (``ends[i]``: turns after unit ``i``, or ``-1`` where decoding cannot
    resume after it), what the face keeps per unit (``payload``), the render state, and its size
    in bytes."""

    scope: bytes
    units: list[bytes]
    ends: list[int]
    payload: list[Any]
    turns: list[Turn]
    render: RenderState | None
    size: int
    anchors: list[bytes] = field(default_factory=list)
    #: a finished response whose chain this is: ``(tenant, response id)`` — or a stored conversation's
    #: items: ``(tenant, "conversation", its id)``, or what they decode to: ``(tenant, "conversation
    #: turns", its id)`` — and what the face keeps of each (``app.api.responses``)
    response: tuple[str, ...] | None = None
    chain: Any = None
    #: the ``id`` of each of ``turns`` known to hold only plain client strings (a clean render had it:
    #: ``app.templates.literal``) — valid while the entry holds them
    plain: frozenset[int] = frozenset()


class Note:
    """What a request's decoding found and made, for the pipeline: which of its turns were decoded
    now (``fresh``: ranges; the others were decoded — and checked — for an earlier request), the
    render to continue (``resume``: its state after the render), and what to keep once the request
    was planned (``PrefixService.keep``; ``tools``: the tool definitions' unit and the face's
    decoding of them). ``settled``: the reused turns known to hold only plain
    client strings (not scanned for control text again); ``clean``: set once planned, how many
    first turns the render found plain (all it rendered, or none)."""

    __slots__ = ("anchors", "clean", "ends", "epoch", "fresh", "payload", "replaces", "resume", "scope", "service",
                 "settled", "tools", "turns", "units")

    def __init__(self, service: PrefixService | None, scope: bytes, units: list[bytes | None], ends: list[int],
                 payload: list[Any], turns: list[Turn], fresh: list[tuple[int, int]] | None,
                 previous: RenderState | None, replaces: Entry | None, anchors: list[bytes],
                 plain: frozenset[int] = frozenset(), tools: tuple[bytes, Any] | None = None) -> None:
        self.service, self.scope, self.units, self.ends, self.payload = service, scope, units, ends, payload
        self.turns, self.replaces, self.anchors, self.tools = turns, replaces, anchors, tools
        self.fresh = fresh if fresh is not None else [(0, len(turns))]
        self.resume = Resume(previous)
        self.settled = self._settled(plain) if plain else frozenset()
        self.clean = 0
        self.epoch = service.epoch if service is not None else 0

    def for_model(self) -> None:
        """Drop what holds only for the model the entry was made with — its render state, the turns
        known plain under its control strings — when another model is served now (the decoded turns
        hold for any)."""
        if self.service is not None and self.epoch != self.service.epoch:
            self.resume, self.settled, self.replaces = Resume(None), frozenset(), None

    def _settled(self, plain: frozenset[int]) -> frozenset[int]:
        """The reused turns whose object is in ``plain`` (by index; each pass over the turns in C)."""
        turns, at = self.turns, 0
        out: list[int] = []
        for begin, stop in [*self.fresh, (len(turns), len(turns))]:
            out.extend(compress(range(at, begin), map(plain.__contains__, map(id, turns[at:begin]))))
            at = stop
        return frozenset(out)

    def plain(self, turns: Sequence[Turn]) -> frozenset[int]:
        """The ``id`` of each of ``turns`` (some of this note's) known plain once planned — for the
        entry that holds ``turns``: an ``id`` is good only while its object lives."""
        known = set(map(id, self.turns[:self.clean]))
        known.update(map(id, map(self.turns.__getitem__, self.settled)))
        return frozenset(filter(known.__contains__, map(id, turns)))

    @property
    def reused(self) -> int:
        """How many of the turns were decoded for an earlier request."""
        return len(self.turns) - sum(stop - begin for begin, stop in self.fresh)

    def __reduce__(self) -> tuple[Any, ...]:
        """A worker gets a blank note: it renders whole, and its render state comes back with the
        plan (``Plan.render``), for this note to keep."""
        return _blank, ()


def _blank() -> Note:
    return Note(None, b"", [], [], [], [], None, None, None, [])


class Recall:
    """What ``recall`` found for one request's units — an entry and, place by place, whether each
    unit is the same there (``equal``) — and the face's account of its decoding, unit by unit:
    what it takes from the entry (``take``) and what it decodes itself (``after``); made into the
    request's ``Note`` (``note``)."""

    def __init__(self, service: PrefixService | None, scope: bytes, units: list[bytes | None], entry: Entry | None,
                 anchors: list[bytes], limit: int, equal: list[bool], tools_key: bytes | None = None,
                 tools: Any = None) -> None:
        self.service, self.scope, self.units, self.entry, self.anchors = service, scope, units, entry, anchors
        #: the request's tool definitions: their unit, and the face's decoding of them — as kept for an
        #: earlier request with the same bytes (``None``: none kept), or as the face sets it once it
        #: decoded them itself, to be kept with the note
        self.tools_key, self.tools = tools_key, tools
        self.limit = limit  # units from this one on are always decoded
        self.equal = equal  # place by place, whether ``units`` and the entry's are the same there
        self.ends: list[int] = []
        self.payload: list[Any] = []
        self.fresh: list[tuple[int, int]] = []
        self.count = 0  # turns so far
        self.taken = 0  # units taken from the entry
        self._runs: list[int | None] | None = None

    def segment(self, i: int) -> int | None:
        """Where the run of units the entry decoded from ``i`` on ends (exclusive), when ``take(i)``
        would take it: the same units at the same places, from a place the entry's decoding could
        resume at to the next; else ``None``."""
        runs = self.takeable()
        return runs[i] if i < len(runs) else None

    def _segments(self) -> list[int | None]:
        entry = self.entry
        runs: list[int | None] = []
        if entry is None:
            return runs
        equal, ends, n = self.equal, entry.ends, min(len(self.equal), self.limit)
        for i in range(n):
            if i and ends[i - 1] < 0:
                runs.append(None)
                continue
            j = i
            while j < n and ends[j] < 0:
                j += 1
            runs.append(j + 1 if j < n and all(equal[i:j + 1]) else None)
        return runs

    def takeable(self) -> list[int | None]:
        """Unit by unit, where the run the entry decoded from it ends (``segment``), or ``None``."""
        if self._runs is None:
            self._runs = self._segments()
        return self._runs

    def known(self, first: int, n: int, pick: Callable[[Any], Any] | None = None) -> list[Any]:
        """For the ``n`` units from ``first`` on: what the face kept of each (its payload, through
        ``pick``) where a run ``take`` could take starts there (``segment``), else ``None`` — in C
        but for the units where none starts."""
        runs = self.takeable()[first:first + n]
        payload = self.entry.payload[first:first + len(runs)] if self.entry is not None else []
        known: list[Any] = list(map(pick, payload)) if pick is not None else list(payload)
        for i in compress(range(len(runs)), map(is_, runs, repeat(None))):
            known[i] = None
        known += [None] * (n - len(known))
        return known

    def take(self, i: int) -> tuple[int, list[Turn], list[Any]] | None:
        """The entry's turns for every run of units from ``i`` on that ``segment`` allows, one after
        the other, and what the face kept of them — the caller's decoder being in its starting state
        at ``i`` (as it is again at each run's end): ``(the unit after them, turns, payload)``; else
        ``None`` (decode unit ``i``)."""
        runs = self.takeable()
        end = i
        while end < len(runs) and (after := runs[end]) is not None:
            end = after
        if end == i:
            return None
        entry = self.entry
        assert entry is not None
        begin = entry.ends[i - 1] if i else 0
        turns = entry.turns[begin:entry.ends[end - 1]]
        base = self.count - begin
        self.ends.extend(base + e if e >= 0 else -1 for e in entry.ends[i:end])
        self.count += len(turns)
        payload = entry.payload[i:end]
        self.payload.extend(payload)
        self.taken += end - i
        return end, turns, payload

    def after(self, turns: int, payload: Any = None, resumable: bool = True) -> None:
        """The next unit is decoded: ``turns`` turns so far (decoding may resume after it only where
        ``resumable``), and what the face keeps of it."""
        self._fresh(turns)
        self.ends.append(turns if resumable else -1)
        self.payload.append(payload)

    def _fresh(self, turns: int) -> None:
        if turns > self.count:
            if self.fresh and self.fresh[-1][1] == self.count:
                self.fresh[-1] = (self.fresh[-1][0], turns)
            else:
                self.fresh.append((self.count, turns))
        self.count = turns

    def assemble(self, decoded: Sequence[tuple[list[Turn], Any] | None]) -> tuple[list[Turn], Note]:
        """The request's turns and its note, for a face whose units each decode on their own (as the
        face decoded them, ``decoded[i]``: the unit's turns and what the face keeps of it; ``None``
        for a unit a run of ``take`` covers): the entry's turns for each such run, ``decoded[i]``
        for every other unit — one account of the whole decoding, after it."""
        turns: list[Turn] = []
        i = 0
        while i < len(decoded):
            taken = self.take(i)
            if taken is not None:
                i = taken[0]
                turns.extend(taken[1])
                continue
            mine = decoded[i]
            assert mine is not None, f"unit {i} is neither taken nor decoded"
            turns.extend(mine[0])
            self.after(len(turns), payload=mine[1])
            i += 1
        return turns, self.note(turns)

    def note(self, turns: list[Turn]) -> Note:
        """The request's note, its decoding done (``turns``: all of them)."""
        self._fresh(len(turns))  # turns made after the last unit (a run of items the face closed)
        previous = self.entry.render if self.entry is not None else None
        if self.taken and self.service is not None:
            self.service.found += 1
        tools = (self.tools_key, self.tools) if self.tools_key is not None and self.tools else None
        return Note(self.service, self.scope, self.units, self.ends, self.payload, turns, self.fresh, previous,
                    self.entry, self.anchors, self.entry.plain if self.entry is not None else frozenset(), tools)


#: a lookup's outcome, as ``PrefixService.on_lookup`` reports it (``toolwire_prefix_lookups_total``)
OUTCOMES = (
    "found",  # a conversation's entry found: the request takes what is the same
    "kept",  # a conversation seen before, nothing of it kept: it is kept now
    "first_sight",  # a conversation never seen: only its anchors noted
    "short",  # fewer than ``min_units`` units: sighted, never kept
    "chain_found",  # a ``previous_response_id``'s chain, or a stored conversation, kept decoded
    "chain_missed",  # … not kept: decoded again (its units looked up)
    "items_found",  # a stored conversation's items kept: read from where its last read ended
    "items_missed",  # … not kept: read whole from the store
)


def _ignored(_: Any) -> None:
    return None


class PrefixService:
    """See the module docstring. ``max_bytes`` 0: off (nothing found, nothing kept). ``on_lookup``
    is told each lookup's outcome (``OUTCOMES``), ``on_held`` the bytes held after each change (the
    metrics, ``app.metrics``)."""

    def __init__(self, max_bytes: int, min_units: int = MIN_UNITS, on_lookup: Callable[[str], None] = _ignored,
                 on_held: Callable[[int], None] = _ignored) -> None:
        self.max_bytes = max_bytes
        self.min_units = min_units
        self.on_lookup, self.on_held = on_lookup, on_held
        self.bytes = 0
        self._lock = threading.Lock()
        self._held: OrderedDict[Any, tuple[int, Any]] = OrderedDict()  # least recently used first
        self._anchored: dict[bytes, list[Entry]] = {}
        self._keyed: dict[tuple[str, ...], Entry] = {}  # by (tenant, response id) or (tenant, "conversation", id)
        self.recalls = 0  # lookups made
        #: bumped when another model is served (``serving``): what was kept before is not reused
        self.epoch = 0
        self._model: object = None
        self.found = 0  # lookups whose request took something
        self.sightings = 0  # anchors noted at conversations' first sightings, in the bound
        self.elements_reused = 0  # bodies' elements parsed for an earlier body (``read_body``)

    @property
    def enabled(self) -> bool:
        return self.max_bytes > 0

    def __len__(self) -> int:
        """Entries, kept tool definitions and ``tojson`` answers (sightings not counted)."""
        return len(self._held) - self.sightings

    # ------------------------------------------------------------------ conversations

    def recall(self, scope: bytes, units: Iterable[bytes | None], limit: int | None = None,
               tools: Any = None) -> Recall | None:
        """The kept entry of ``scope``'s that shares the most units with ``units`` at the same places
        (see the module docstring), for the face to take its decoding of them; the units from
        ``limit`` on are always decoded. ``tools``: the request's tool definitions as sent (a list),
        whose decoding kept for an earlier request of ``scope`` with the same bytes the ``Recall``
        holds. ``None`` — decode and render as without the service — when it is off, for fewer
        than ``min_units`` units (the conversation is sighted all the same from two units on; one
        unit, a one-off question, costs no digest: it tells no conversation), and at a
        conversation's first sighting (then only the first units are drawn from ``units``)."""
        if not self.enabled:
            return None
        drawn = iter(units)
        head = list(islice(drawn, max(HEAD, self.min_units)))
        # one unit tells no conversation (``_anchors``): no digest made, nothing noted (``_seen``)
        anchors, telling = _anchors(scope, head) if len(head) > 1 else ([], [])
        with self._lock:
            self.recalls += 1
            if len(head) < self.min_units:  # not kept, but seen: an agent's first turn sights its conversation
                self._seen(telling)
                outcome: str | None = "short"
            elif not any(anchor in self._anchored for anchor in telling) and not self._seen(telling):
                outcome = "first_sight"
            else:
                outcome = None
        if outcome is not None:
            self.on_lookup(outcome)
            return None
        units = [*head, *drawn]
        limit = len(units) if limit is None else limit
        tools_key = unit(tools) if isinstance(tools, list) and tools else None
        kept_tools = self.recall_tools(scope, tools_key)
        best: Entry | None = None
        best_equal: list[bool] = []
        shared = 0
        with self._lock:
            for anchor in anchors:
                bucket = self._anchored.get(anchor)
                if not bucket:
                    continue
                for entry in reversed(bucket[-MAX_PROBES:]):
                    equal = same_places(entry.units, units)
                    n = sum(equal)
                    if n > shared:
                        best, best_equal, shared = entry, equal, n
                break  # the most specific anchor with candidates
            if best is not None:
                self._held.move_to_end(id(best))
        self.on_lookup("found" if best is not None else "kept")
        if best is not None:
            for i, same in enumerate(best_equal):
                if same:
                    units[i] = best.units[i]  # the same bytes: kept once
        return Recall(self, scope, units, best, anchors, limit, best_equal, tools_key, kept_tools)

    def _seen(self, anchors: list[bytes]) -> bool:
        """Whether one of ``anchors`` was seen before (at a conversation's first sighting); if none
        was, they are noted now, in the bound like everything kept (the lock held). No anchors:
        never seen."""
        if not anchors:
            return False
        keys = [(_SEEN, anchor) for anchor in anchors]
        found = [key for key in keys if key in self._held]
        for key in found:
            self._held.move_to_end(key)
        if found:
            return True
        for key in keys:
            self._held[key] = (SEEN_BYTES, None)
        self.bytes += SEEN_BYTES * len(keys)
        self.sightings += len(keys)
        self._bound()
        return False

    def keep(self, note: Note) -> None:
        """Keep what ``note``'s request made (its render state in ``note.resume``), once it was
        planned; the entry of the same conversation it supersedes is dropped."""
        if not self.enabled or not note.anchors or note.epoch != self.epoch:
            return
        if note.tools is not None:
            self.keep_tools(note.scope, *note.tools)
        n = next((i for i, u in enumerate(note.units) if u is None), len(note.units))
        n = min(n, len(note.ends))
        while n and note.ends[n - 1] < 0:
            n -= 1
        if n < self.min_units:
            return
        units = cast(list[bytes], note.units[:n])  # (none is ``None``, up to ``n``)
        turns = note.turns[:note.ends[n - 1]]
        render = note.resume.state  # compared item by item when used: good whatever the units kept
        # a unit's bytes hold its turn's strings and more: its turn, as parsed, as a model, as a turn
        size = 4 * units_bytes(units) + UNIT_OVERHEAD * n + (render.size if render is not None else 0)
        # the anchors ``recall`` worked out: they read the first units alone, the same bytes here
        # (``n`` is at least ``min_units``, none of them ``None``)
        entry = Entry(note.scope, units, note.ends[:n], note.payload[:n], turns, render, size, note.anchors,
                      plain=note.plain(turns))
        old = note.replaces
        with self._lock:
            if old is not None and id(old) in self._held and sum(same_places(old.units, units)) >= len(old.units) - 2:
                self._drop(old)  # the same conversation, a turn on
            self._add(entry)

    # ------------------------------------------------------------------ chains

    def recall_response(self, tenant: str, response_id: str, scope: bytes) -> Entry | None:
        """The entry kept for ``tenant``'s finished response ``response_id`` (of ``scope``), if any."""
        return self._recall_keyed((tenant, response_id), scope)

    def _recall_keyed(self, key: tuple[str, ...], scope: bytes, kind: str = "chain") -> Entry | None:
        if not self.enabled:
            return None
        with self._lock:
            self.recalls += 1
            entry = self._keyed.get(key)
            if entry is not None and entry.scope == scope:
                self._held.move_to_end(id(entry))
                self.found += 1
            else:
                entry = None
        self.on_lookup(f"{kind}_found" if entry is not None else f"{kind}_missed")
        return entry

    def keep_response(self, tenant: str, response_id: str, scope: bytes, turns: list[Turn],
                      render: RenderState | None, chain: Any, chain_bytes: int, replaces: Entry | None,
                      plain: frozenset[int] = frozenset()) -> None:
        """Keep a finished response's chain: the ``turns`` it decodes to (its output included; the
        ``id`` of those known plain in ``plain``), the render of its request, and the face's facts
        about the chain (``chain``, ``chain_bytes`` more to count); the entry of the response it
        continued is dropped."""
        self._keep_decoded((tenant, response_id), scope, turns, render, chain, chain_bytes, replaces, plain)

    def recall_conversation(self, tenant: str, conversation_id: str, scope: bytes) -> Entry | None:
        """The entry ``keep_conversation`` kept for ``tenant``'s stored conversation, if any."""
        return self._recall_keyed((tenant, "conversation turns", conversation_id), scope)

    def keep_conversation(self, tenant: str, conversation_id: str, scope: bytes, turns: list[Turn],
                          render: RenderState | None, facts: Any, facts_bytes: int, replaces: Entry | None,
                          plain: frozenset[int] = frozenset()) -> None:
        """Keep what a stored conversation's items decode to once a response added its own to them
        (as ``keep_response`` keeps a chain): ``facts``, the face's, say which items those are."""
        self._keep_decoded((tenant, "conversation turns", conversation_id), scope, turns, render, facts, facts_bytes,
                           replaces, plain)

    def _keep_decoded(self, key: tuple[str, ...], scope: bytes, turns: list[Turn], render: RenderState | None,
                      chain: Any, chain_bytes: int, replaces: Entry | None, plain: frozenset[int]) -> None:
        if not self.enabled:
            return
        known = replaces is not None and len(replaces.turns) <= len(turns) and all(
            map(is_, replaces.turns, turns))  # (its turns begin with its chain's; in C)
        counted, rest = 0, turns
        if known and replaces is not None:
            counted = replaces.size - (replaces.render.size if replaces.render is not None else 0)
            rest = turns[len(replaces.turns):]
        size = (counted + 3 * sum(map(turn_bytes, rest)) + UNIT_OVERHEAD * len(rest) + chain_bytes
                + (render.size if render is not None else 0))
        entry = Entry(scope, [], [], [], turns, render, size, response=key, chain=chain, plain=plain)
        with self._lock:
            if replaces is not None and id(replaces) in self._held:
                self._drop(replaces)
            self._add(entry)

    # ------------------------------------------------------------------ a conversation's items

    def recall_items(self, tenant: str, conversation_id: str, scope: bytes) -> Any:
        """What ``keep_items`` kept of ``tenant``'s stored conversation ``conversation_id`` (read under
        ``scope``), or ``None``."""
        entry = self._recall_keyed((tenant, "conversation", conversation_id), scope, "items")
        return entry.chain if entry is not None else None

    def keep_items(self, tenant: str, conversation_id: str, scope: bytes, items: Any, size: int) -> None:
        """Keep what a face read of ``tenant``'s stored conversation (``items``, about ``size`` bytes),
        in place of what was kept of it before: the face checks it against the store when it next
        reads the conversation, and reads only what was added since."""
        if not self.enabled:
            return
        entry = Entry(scope, [], [], [], [], None, size, response=(tenant, "conversation", conversation_id),
                      chain=items)
        with self._lock:
            self._add(entry)

    def forget_response(self, tenant: str, response_id: str) -> None:
        """``tenant``'s response ``response_id`` is gone (deleted): so is what was kept of it."""
        self._forget((tenant, response_id))

    def forget_items(self, tenant: str, conversation_id: str) -> None:
        """``tenant``'s stored conversation ``conversation_id`` is gone (deleted): so are the items
        kept of it (``keep_items``) and what they decode to (``keep_conversation``)."""
        self._forget((tenant, "conversation", conversation_id))
        self._forget((tenant, "conversation turns", conversation_id))

    def _forget(self, key: tuple[str, ...]) -> None:
        with self._lock:
            entry = self._keyed.get(key)
            if entry is not None:
                self._drop(entry)
            held = self.bytes
        self.on_held(held)

    # ------------------------------------------------------------------ request bodies

    def read_body(self, scope: bytes, raw: bytes, key: str) -> tuple[Any, Elements | None]:
        """``raw`` (a request body) parsed, with its list at ``key`` (the conversation: ``messages``,
        ``input``) parsed and encoded only past what an earlier body of ``scope``'s with the same
        first ``OPENING_BYTES`` held (``app.bodies``): up to ``MAX_PROBES`` layouts per first
        bytes, the most recent first. A body reusing nothing leaves its layout only when its first
        elements were sighted before, as a conversation's are (``recall``: their digests — the
        first one alone does not tell — so an element edited at every turn does not keep the
        conversation from being kept; a batch of one-off requests encodes nothing more than
        without the service). Off, and for a body of
        less than twice ``OPENING_BYTES`` (not worth it): ``orjson.loads``."""
        if not self.enabled or len(raw) < 2 * OPENING_BYTES:
            return orjson.loads(raw), None
        held_key = (_BODY, scope, hashlib.blake2b(raw[:OPENING_BYTES], digest_size=16).digest())
        with self._lock:
            held = self._held.get(held_key)
        layouts: list[Layout] = held[1] if held is not None else []

        def admit(jsons: list[bytes | None]) -> bool:  # sighted as a conversation is: by its first elements
            _, telling = _anchors(b"body\x00" + scope + key.encode(), jsons)
            with self._lock:
                return self._seen(telling)

        body, elements = read(raw, key, layouts, admit)
        if elements is not None:
            self.elements_reused += elements.reused - (elements.replaced is not None)
        if elements is not None and elements.layout is not None:
            kept = [elements.layout, *(layout for layout in layouts if layout is not elements.base)][:MAX_PROBES]
            size = sum(layout.size for layout in kept) + len(held_key[2]) + UNIT_OVERHEAD
            with self._lock:
                old = self._held.pop(held_key, None)
                if old is not None:
                    self.bytes -= old[0]
                if size <= self.max_bytes:
                    self._held[held_key] = (size, kept)
                    self.bytes += size
                self._bound()
        return body, elements

    # ------------------------------------------------------------------ tool definitions

    def tools_key(self, scope: bytes, tools: list[Any]) -> bytes | None:
        """The unit of ``tools`` (a request's tool definitions as sent) for ``recall_tools`` and
        ``keep_tools`` — or ``None`` at their first sighting in ``scope``: then only a digest of their
        names is noted (``SEEN_BYTES``, in the bound) and they are not encoded, so a request whose
        tools are never sent again costs what it costs without the service."""
        if not self.enabled or not tools:
            return None
        names = "\x00".join(str(t.get("name")) if isinstance(t, dict) else "" for t in tools)
        sighting = hashlib.blake2b(b"tools\x00" + scope + names.encode("utf-8", "surrogatepass"),
                                   digest_size=16).digest()
        with self._lock:
            seen = self._seen([sighting])
        return unit(tools) if seen else None

    def recall_tools(self, scope: bytes, key: bytes | None) -> Any:
        """What a face kept (``keep_tools``) of the tool definitions whose unit is ``key``
        (``unit(tools)``) for an earlier request of ``scope``, or ``None`` (a face whose
        conversation goes through ``recall`` gets it there)."""
        if key is None or not self.enabled:
            return None
        held_key = (_TOOLS, scope, key)
        with self._lock:
            held = self._held.get(held_key)
            if held is None:
                return None
            self._held.move_to_end(held_key)
            return held[1]

    def keep_tools(self, scope: bytes, key: bytes | None, tools: Any) -> None:
        """Keep a face's decoding of the tool definitions whose unit is ``key``, validated, for
        ``scope``'s next requests: agents send the same tools every turn, and the face hands the
        same objects on — so what the pipeline works out from a tool once (``Tool.once``: its
        schema's canonical text, its JSON) is not worked out again. Counted in the budget four
        times the bytes the unit stands for (as sent, parsed, validated, offered). Only for tools
        seen before (``tools_key``), or a conversation seen before: a face whose conversation goes
        through ``recall`` has them kept with its note (``keep``), once planned."""
        if key is None or not self.enabled:
            return
        held_key = (_TOOLS, scope, key)
        size = 4 * unit_bytes(key) + len(key) + UNIT_OVERHEAD
        with self._lock:
            if held_key not in self._held and size <= self.max_bytes:
                self._held[held_key] = (size, tools)
                self.bytes += size
                self._bound()

    # ------------------------------------------------------------------ tojson's memo

    def get(self, key: bytes) -> str | None:
        with self._lock:
            held = self._held.get(key)
            if held is None:
                return None
            self._held.move_to_end(key)
            answer: str = held[1]
            return answer

    def put(self, key: bytes, answer: str) -> None:
        if not self.enabled:
            return
        size = len(key) + sys.getsizeof(answer)
        with self._lock:
            if key not in self._held and size <= self.max_bytes:
                self._held[key] = (size, answer)
                self.bytes += size
                self._bound()

    # ------------------------------------------------------------------ the bound

    def _add(self, entry: Entry) -> None:
        if entry.size > self.max_bytes:
            return
        if entry.response is not None:
            old = self._keyed.get(entry.response)
            if old is not None:
                self._drop(old)
            self._keyed[entry.response] = entry
        for anchor in entry.anchors:
            self._anchored.setdefault(anchor, []).append(entry)
        self._held[id(entry)] = (entry.size, entry)
        self.bytes += entry.size
        self._bound()

    def _drop(self, entry: Entry) -> None:
        held = self._held.pop(id(entry), None)
        if held is None:
            return
        self.bytes -= held[0]
        if entry.response is not None and self._keyed.get(entry.response) is entry:
            del self._keyed[entry.response]
        for anchor in entry.anchors:
            bucket = self._anchored.get(anchor)
            if bucket is not None:
                bucket.remove(entry)
                if not bucket:
                    del self._anchored[anchor]

    def _bound(self) -> None:
        """Drop the least recently used past the budget, and report what is held (the lock held)."""
        while self.bytes > self.max_bytes and self._held:
            key, (size, value) = next(iter(self._held.items()))
            if isinstance(value, Entry):
                self._drop(value)
            else:
                del self._held[key]
                self.bytes -= size
                if isinstance(key, tuple) and key[0] == _SEEN:
                    self.sightings -= 1
        self.on_held(self.bytes)

    def serving(self, model: object) -> None:
        """``model`` is served from now on: a render state and the turns known plain were made for a
        template and control strings, so when the model is another than before, everything is
        forgotten and notes made before are not kept (``Note.for_model``)."""
        with self._lock:
            if model is self._model:
                return
            self._model = model
            self.epoch += 1
        self.clear()

    def clear(self) -> None:
        """Forget everything (benchmarks measure a first request this way)."""
        with self._lock:
            self._held.clear()
            self._anchored.clear()
            self._keyed.clear()
            self.bytes = self.sightings = 0
        self.on_held(0)


_SEEN = "seen"  # (the key of an anchor's sighting in the bound: apart from entries' and ``tojson``'s)
_BODY = "body"  # (the key of a request body's layouts in the bound: ``read_body``)
_TOOLS = "tools"  # (the key of a face's kept tool definitions in the bound)


def _anchors(scope: bytes, units: Sequence[bytes | None]) -> tuple[list[bytes], list[bytes]]:
    """The digests an entry with these units is filed under, most specific first: its first 4, 2
    and 1 units, then the units at ``PLACES`` alone (found again when the first changed: a system
    prompt that carries the time) — and those that tell a conversation's sighting: all but the one
    of the first unit alone, which many conversations share (a system prompt)."""
    found: list[bytes] = []
    digest = hashlib.blake2b(scope, digest_size=16)
    for k, data in enumerate(units[:ANCHORS[0]], 1):
        if data is None:
            break
        digest.update(len(data).to_bytes(8, "little") + data[:ANCHOR_BYTES])
        if k in ANCHORS:
            found.append(digest.copy().digest())
    first = found[0] if found else None
    found.reverse()
    for place in PLACES:
        data = units[place] if place < len(units) else None
        if data is not None:
            alone = hashlib.blake2b(scope + place.to_bytes(2, "little"), digest_size=16)
            alone.update(len(data).to_bytes(8, "little") + data[:ANCHOR_BYTES])
            found.append(alone.digest())
    return found, [anchor for anchor in found if anchor != first]


def keep_after(note: Note | None) -> None:
    """Keep ``note``'s request (``PrefixService.keep``), if it has one to keep."""
    if note is not None and note.service is not None:
        note.service.keep(note)


__all__ = ["MIN_UNITS", "OUTCOMES", "Entry", "Note", "PrefixService", "Recall", "keep_after", "scope_of", "unit"]
