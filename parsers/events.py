"""What the parsers hand back: an ordered list of events per fed chunk.

The events of one response, concatenated in order, describe the whole message:

* ``Content`` / ``Reasoning`` — user-visible text and reasoning text, in order.
* ``CallStart`` — a tool call begins: its position in this response (``index``, 0, 1, 2 …), its
  ``name`` and the ``id`` the format carried (``None`` when the format has no ids).
* ``CallArgs`` — a fragment of the call's arguments. The fragments of one call, concatenated, are
  one JSON object when the call ends with ``ok=True``.
* ``CallEnd`` — the call is over. ``ok=False`` means the model never finished it or wrote it
  malformed; ``raw`` then holds the call's source text (markers included) so that consumers which
  must not present an unfinished call can pass the text through as content instead.
  A call that ends ok is complete whatever follows it: in a call list (pythonic or JSON) cut off
  before it closes, the calls before the cut count, as separate call blocks do.

Events of one call are contiguous: no ``Content`` or ``Reasoning`` between a ``CallStart`` and
its ``CallEnd``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class Content:
    text: str


@dataclass(slots=True)
class Reasoning:
    text: str


@dataclass(slots=True)
class CallStart:
    index: int
    name: str
    id: str | None = None


@dataclass(slots=True)
class CallArgs:
    index: int
    text: str


@dataclass(slots=True)
class CallEnd:
    index: int
    ok: bool
    raw: str = ""


Event = Content | Reasoning | CallStart | CallArgs | CallEnd
