"""Stored responses (the Responses API's ``store: true``): ``StoredResponse``, the ``Chain`` a
continuation (``previous_response_id``) reads back, and the ``ResponseStore`` that keeps them.

A record belongs to its ``owner``: a keyed digest of the API key that made it (``""`` when the
server has no keys: one tenant), never the key. Its ``body`` is the encoded JSON of what the API
needs back (the response object, this turn's input items, the previous response's id); what the
response object echoes of its request — its instructions and tools, the same turn after turn and
~90% of an agent's record — is kept apart, once per owner and content (``StoredResponse.parts``),
and counted once in the byte budget. ``StoredResponse.size`` is the whole record's length, which
``--max-stored-response-bytes`` bounds.

A ``ResponseStore`` keeps records for ``ttl`` seconds, each readable only by the tenant that stored
it (``tenant``: the request's tenant id, ``app.tenancy``):

* ``put(record, tenant)`` stores (replacing a record with the same id) and indexes its items;
* ``get(id, tenant)`` → the record, or ``None`` when it is absent, expired or another tenant's;
* ``delete(id, tenant)`` → whether it was there (and the tenant's);
* ``chain(id, tenant, limits)`` → the responses a continuation from ``id`` builds on, oldest first,
  read in one round trip (SQLite: one recursive query; Redis: one script), within ``limits``;
  ``links(id, tenant, limits)`` the same walk without the bodies, with the owner's count of removed
  responses and the earliest time one of the chain's responses expires;
* ``removals(id, tenant)`` → the owner's count of removed responses (deleted, replaced, dropped by
  the budget or as expired), or ``None`` when ``id`` is not there: a chain walked before is still
  whole when its newest response is there, the count has not moved and none of it has expired
  (``Chain.removals``, ``Chain.expires``) — a check in one round trip however long the chain;
* ``items(ids, tenant, limits)`` → the tenant's stored items with those ids, from its stored
  responses and conversations (the item index, ``app.state.items``: what an ``item_reference``
  names), toolwire's own copy when there is one.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson

from app.state.items import Found


@dataclass(frozen=True, slots=True)
class StoredResponse:
    """One stored response: the object ``GET /v1/responses/{id}`` returns, the input items of the
    request that made it, and the response it continued."""

    id: str
    owner: str
    response: dict[str, Any]
    input: list[dict[str, Any]] = field(default_factory=list)
    previous_response_id: str | None = None
    #: the record as stored, once made (``parts``; a copy made with other fields starts without)
    stored: Parts | None = field(default=None, init=False, compare=False, repr=False)

    def encode(self) -> bytes:
        """The record's whole encoding (owner and links are kept beside it, not in it)."""
        return orjson.dumps({"response": self.response, "input": self.input,
                             "previous_response_id": self.previous_response_id})

    def size(self) -> int:
        """The bytes of the record's whole encoding (what ``--max-stored-response-bytes`` bounds),
        worked out from its ``parts`` (made once, for its store too)."""
        body, echo, _ = self.parts()
        return len(body) if echo is None else len(body) + len(echo) - _SPLIT

    def parts(self) -> Parts:
        """The record as a store keeps it: what responses echo of their requests apart
        (``ECHOED``) — its body with those fields ``null``, their encoding and its digest — or,
        when they take fewer than ``ECHO_MIN`` bytes (or the response lacks one), its whole body and
        ``None``, ``None``. ``decode`` given the echo back gives the record again. Made once: the
        record's fields are not to change after."""
        if self.stored is not None:
            return self.stored
        response = self.response
        made: Parts | None = None
        if all(name in response for name in ECHOED):
            echo = orjson.dumps([response[name] for name in ECHOED])
            if len(echo) >= ECHO_MIN:
                body = orjson.dumps({"response": {**response, **dict.fromkeys(ECHOED)}, "input": self.input,
                                     "previous_response_id": self.previous_response_id})
                made = (body, echo, hashlib.sha256(echo).digest())
        if made is None:
            made = (self.encode(), None, None)
        object.__setattr__(self, "stored", made)
        return made

    @classmethod
    def decode(cls, response_id: str, owner: str, body: bytes, echoed: list[Any] | None = None) -> StoredResponse:
        """The record from its ``body`` and, when its echo was stored apart (``parts``), the echo's
        values (``orjson.loads`` of it: records of one chain may share them)."""
        data = orjson.loads(body)
        response = data.get("response") or {}
        if echoed is not None:
            response.update(zip(ECHOED, echoed, strict=True))
        return cls(response_id, owner, response, data.get("input") or [], data.get("previous_response_id"))


def decode_record(response_id: str, owner: str, body: bytes, echo: bytes | None) -> StoredResponse:
    """A stored record from its ``body`` and, when what it echoes was kept apart
    (``StoredResponse.parts``), the echo's encoding (``None`` or empty: none)."""
    return StoredResponse.decode(response_id, owner, body, orjson.loads(echo) if echo else None)


#: the response object's fields that echo its request, the same in every turn of an agent's
#: conversation (~90% of a stored response's bytes with Codex's or the Agents SDK's instructions
#: and tools): a store may keep one copy of them per owner and content (``StoredResponse.parts``)
ECHOED = ("instructions", "tools")
#: fewer bytes of echo than this are stored in their record
ECHO_MIN = 1024
#: a record as a store keeps it (``StoredResponse.parts``): its body, its echo and the echo's digest
Parts = tuple[bytes, bytes | None, bytes | None]
#: what a record's body and echo take beyond its whole encoding: the body's two ``null`` and the
#: echo's brackets and comma
_SPLIT = 11


@dataclass(frozen=True, slots=True)
class ChainLimits:
    """What one continuation may load: links followed, bytes of stored records read, and items
    (input and output) decoded."""

    links: int = 256
    bytes: int = 16 << 20
    items: int = 10_000


@dataclass(slots=True)
class Chain:
    """The responses a continuation builds on, oldest first, as far as they could be read.

    ``missing`` is the id of a link that could not be found (expired, deleted, another owner's)
    — the responses before it are not in ``responses``; ``over`` names the limit that stopped the
    walk (``"links"`` or ``"bytes"``) or the decoding (``"items"``), and ``size`` is the bytes read. ``ids`` are the responses'
    ids newest first (the order the walk met them). From ``links``: ``removals``, the owner's count
    of removed responses when the walk was made, and ``expires``, the earliest expiry (Unix time) of
    the responses walked."""

    responses: list[StoredResponse] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)
    missing: str | None = None
    over: str | None = None
    size: int = 0
    removals: int | None = None
    expires: float = 0.0


@dataclass(frozen=True, slots=True)
class Link:
    """One stored record as a chain walk sees it before reading its body."""

    id: str
    owner: str
    previous: str | None
    size: int


def walk(first: str, links: dict[str, Link], owner: str, limits: ChainLimits) -> Chain:
    """Which records a continuation from ``first`` reads (``links``: what the store found, by id):
    the walk stops at the first link that is absent or not ``owner``'s, and before a limit would be
    passed. The ``Chain`` it returns has no responses yet; ``ids`` lists the ones to read, newest
    first."""
    chain = Chain()
    wanted: str | None = first
    while wanted is not None:
        link = links.get(wanted)
        if link is None or link.owner != owner:
            chain.missing = wanted
            break
        if len(chain.ids) >= limits.links:
            chain.over = "links"
            break
        if chain.size + link.size > limits.bytes:
            chain.over = "bytes"
            break
        chain.ids.append(link.id)
        chain.size += link.size
        wanted = link.previous
    return chain


def decode_chain(chain: Chain, owner: str, bodies: dict[str, bytes], limits: ChainLimits,
                 echoes: dict[str, bytes] | None = None) -> Chain:
    """``chain.responses`` decoded from ``bodies`` (by id), newest first, stopping before the record
    whose items would pass ``limits.items`` (``over`` is then ``"items"``, and ``ids`` and ``size``
    keep to the records decoded): the work is bounded by the items, not only by the bytes.
    ``echoes``: the echo of each record stored apart (``StoredResponse.parts``), by id — each
    different one decoded once, its values shared by the records that echo it."""
    decoded: list[StoredResponse] = []
    items = size = 0
    values: dict[bytes, list[Any]] = {}
    for key in chain.ids:
        echo = echoes.get(key) if echoes else None
        if echo is not None and echo not in values:
            values[echo] = orjson.loads(echo)
        record = StoredResponse.decode(key, owner, bodies[key], values[echo] if echo is not None else None)
        items += len(record.input) + len(record.response.get("output") or ())
        if items > limits.items:
            chain.over = "items"
            break
        decoded.append(record)
        size += len(bodies[key])
    if chain.over == "items":
        chain.ids, chain.size = chain.ids[:len(decoded)], size
    chain.responses = decoded[::-1]
    return chain


class ResponseStore(Protocol):
    """See the module docstring."""

    async def put(self, record: StoredResponse, tenant: str) -> None: ...

    async def get(self, response_id: str, tenant: str) -> StoredResponse | None: ...

    async def delete(self, response_id: str, tenant: str) -> bool: ...

    async def chain(self, response_id: str, tenant: str, limits: ChainLimits) -> Chain: ...

    async def links(self, response_id: str, tenant: str, limits: ChainLimits) -> Chain:
        """The walk ``chain`` makes, without reading the bodies (``Chain.ids``, ``missing``, ``over``
        for links and bytes, ``size``): what a continuation whose chain is already decoded
        (``app.prefix``) checks."""
        ...

    async def removals(self, response_id: str, tenant: str) -> int | None: ...

    async def items(self, ids: Sequence[str], tenant: str, limits: ChainLimits) -> Found: ...


__all__ = ["ECHOED", "ECHO_MIN", "Chain", "ChainLimits", "Link", "Parts", "ResponseStore", "StoredResponse",
           "decode_chain", "decode_record", "walk"]
