"""What a response builds on, read from the store.

``context(…)`` reads, for one ``POST /v1/responses``:

* the stored chain of a ``previous_response_id`` (``history``), or the items of a ``conversation``
  (they come first in the prompt; the two together are a 400, as OpenAI answers: ``parse``) — of a
  conversation read before, only the items added since (``conversation_items``);
* the stored items the request names by id — each ``item_reference`` (replaced by the item it
  refers to, within the tenant's own stored responses and conversations; an id that cannot be
  found is a 400 naming it), and each reasoning item, which reaches the prompt only as
  toolwire's own copy of it (``Decoder``: a client's reasoning is never the model's thinking).

What the finished response leaves there is ``keep``'s.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace
from itertools import compress, repeat
from operator import eq
from typing import Any

from app.api.responses.history import chain_limits, history, store_unavailable
from app.api.responses.protocol import Parsed, ResponsesRequest
from app.bodies import Elements, as_elements, each
from app.errors import APIError, bad_request
from app.prefix import Entry, PrefixService, Recall, scope_of, unit
from app.settings import Settings
from app.state import (
    ChainLimits,
    ConversationLimits,
    ConversationStore,
    ItemsMark,
    ResponseStore,
    StoredConversation,
    StoredItem,
    StoreUnavailable,
)
from app.thinking_signature import SEALED, ThinkingSigner


def conversation_not_found(conversation: str, param: str | None = None) -> APIError:
    return APIError(404, f"Conversation with id {conversation!r} not found.", param=param, code="not_found")


def conversation_limits(settings: Settings) -> ConversationLimits:
    return ConversationLimits(settings.conversation_max_items, settings.conversation_max_bytes)


def over_limit(over: str, settings: Settings, what: str, param: str | None) -> APIError:
    """The 400 for a conversation write past one of its bounds, naming the setting."""
    if over == "items":
        return bad_request(f"{what}: the conversation would hold more than {settings.conversation_max_items} items "
                           "(--conversation-max-items)", param, code="conversation_too_long")
    cap = min(settings.conversation_max_bytes, settings.response_store_max_bytes)
    setting = ("--conversation-max-bytes" if settings.conversation_max_bytes <= settings.response_store_max_bytes
               else "--response-store-max-bytes")
    return bad_request(f"{what}: the conversation would hold more than {cap} bytes ({setting})", param,
                       code="conversation_too_large")


def conversation_item(item: dict[str, Any]) -> dict[str, Any]:
    """An input or output item as a conversation keeps it: a message's text as content parts, with a
    status (as OpenAI lists conversation items)."""
    if item.get("type") != "message":
        return item
    content = item.get("content")
    if isinstance(content, str):
        kind = "output_text" if item.get("role") == "assistant" else "input_text"
        part: dict[str, Any] = {"type": kind, "text": content}
        if kind == "output_text":
            part["annotations"] = []
        item = {**item, "content": [part]}
    return item if "status" in item else {**item, "status": "completed"}


async def found_items(responses: ResponseStore | None, ids: list[str], tenant: str,
                      settings: Settings) -> dict[str, StoredItem]:
    """The tenant's stored items with these ids (toolwire's own copy where there is one)."""
    if not ids or responses is None:
        return {}
    try:
        found = await responses.items(ids, tenant, ChainLimits(settings.max_chain_links, settings.max_chain_bytes))
    except StoreUnavailable as exc:
        raise store_unavailable(exc) from None
    if found.over:
        raise bad_request(f"input: the stored responses its items refer to are larger than {settings.max_chain_bytes} "
                          "bytes (--max-chain-bytes); send the items themselves instead", "input",
                          code="item_reference_too_large")
    return found.items


def resolved(items: list[dict[str, Any]], stored: dict[str, StoredItem], where: str) -> list[dict[str, Any]]:
    """``items`` with each ``item_reference`` replaced by the stored item it refers to (a 400 naming an id
    the tenant's store does not hold)."""
    out = []
    for i, item in enumerate(items):
        if item.get("type") != "item_reference":
            out.append(item)
            continue
        ref = item.get("id")
        found = stored.get(ref) if isinstance(ref, str) else None
        if found is None or found.item.get("type") == "item_reference":
            raise bad_request(f"{where}[{i}]: item_reference {ref!r} was not found among your stored responses and "
                              "conversations (expired, deleted, never stored, or stored with store: false); send the "
                              "item itself instead", f"{where}.{i}", code="item_not_found")
        out.append(found.item)
    return out


#: seconds before the earliest expiry of a kept chain's responses that it is walked again rather
#: than trusted (processes on one SQLite file may read the time apart; a Redis answer takes a while)
EXPIRY_MARGIN = 60.0


@dataclass(frozen=True, slots=True)
class ChainFacts:
    """What a continuation checks of a chain it has decoded (``app.prefix``): its responses' ids and
    how many items each holds (inputs and outputs), newest first, and its stored bytes; from the
    store's last walk of it, the owner's count of removed responses and the earliest expiry
    (``Chain``; ``removals`` ``None``: not walked yet)."""

    ids: tuple[str, ...] = ()
    items: tuple[int, ...] = ()
    size: int = 0
    removals: int | None = None
    expires: float = 0.0

    def then(self, response_id: str, items: int, size: int) -> ChainFacts:
        """The chain with ``response_id`` (holding ``items`` items in ``size`` stored bytes) after it."""
        return ChainFacts((response_id, *self.ids), (items, *self.items), self.size + size, self.removals,
                          self.expires)


@dataclass(frozen=True, slots=True)
class ConversationFacts:
    """What a stored conversation's decoding kept by the prefix service (``keep_conversation``) is
    the decoding of: the items the conversation held when its response's request read them
    (``held``), then the ones that response added (``added``, their ids, in order) — and nothing
    else: a read that finds the same is its conversation."""

    held: int
    added: tuple[str, ...]

    def hold(self, items: KeptItems) -> bool:
        """Whether ``items`` (a read of the conversation) are those: the first ``held`` kept from the
        read the response's request made, the rest the ones it added."""
        return (items.base == self.held and len(items.items) == self.held + len(self.added)
                and tuple(item.id for item in items.items[self.held:]) == self.added)


@dataclass
class Context:
    """What one response builds on (see the module docstring). ``before``: item lists decoded ahead
    of the input, each with whether toolwire wrote it; ``input``: the request's items, references
    replaced; ``stored``: stored copies by id (the decoder trusts reasoning only through these), of
    which ``own`` are the conversation's. ``kept``: the decoded chain of ``previous_response_id``
    the prefix service had (then ``before`` is empty); ``recall``: what it has of the units
    otherwise; ``facts``: the chain's, for the next continuation."""

    before: list[tuple[str, list[dict[str, Any]], bool]] = field(default_factory=list)
    input: list[dict[str, Any]] = field(default_factory=list)
    stored: dict[str, StoredItem] = field(default_factory=dict)
    conversation: str | None = None
    own: AbstractSet[str] = frozenset()
    scope: bytes = b""
    kept: Entry | None = None
    recall: Recall | None = None
    facts: ChainFacts = field(default_factory=ChainFacts)
    held_items: list[dict[str, Any]] = field(default_factory=list)  # the conversation's items when read


async def kept_chain(responses: ResponseStore | None, settings: Settings, prefix: PrefixService, previous: str,
                     tenant: str, scope: bytes) -> tuple[Entry, ChainFacts] | None:
    """The decoded chain the prefix service kept for ``previous`` and its facts, if it is still the
    chain a continuation reads — the same responses, all there, within every limit; else ``None``
    (read and decode it, and answer what is wrong with it). Checked in one round trip however long
    the chain when the store's last walk of it still holds (``previous`` is there, none of the
    owner's responses was removed since, none has expired: ``ResponseStore.removals``), else by
    walking its links again (no body read)."""
    entry = prefix.recall_response(tenant, previous, scope)
    if entry is None or responses is None or not isinstance(entry.chain, ChainFacts):
        return None
    facts = entry.chain
    limits = chain_limits(settings)
    if len(facts.ids) > limits.links or facts.size > limits.bytes or sum(facts.items) > limits.items:
        return None
    try:
        if (facts.removals is not None and time.time() < facts.expires - EXPIRY_MARGIN
                and await responses.removals(previous, tenant) == facts.removals):
            return entry, facts
        links = await responses.links(previous, tenant, limits)
    except StoreUnavailable as exc:
        raise store_unavailable(exc) from None
    if links.missing is not None or links.over is not None or tuple(links.ids) != facts.ids:
        prefix.forget_response(tenant, previous)  # gone or broken for good: nothing to keep it for
        return None
    return entry, replace(facts, size=links.size, removals=links.removals, expires=links.expires)


def item_unit(item: dict[str, Any], trusted: bool, own: bool) -> bytes | None:
    """An item's unit (``app.prefix``), with whether toolwire wrote it and whether it is one of the
    conversation's own copies."""
    return unit(item, b"t" if trusted else b"o" if own else b"u")


def _sent_unit(item: Any, data: bytes | None) -> bytes | None:
    """An input item's unit as the client sent it (``data``: its JSON, where known); none for a
    reference (what it stands for is the store's)."""
    return None if isinstance(item, dict) and item.get("type") == "item_reference" else unit(item, b"u", data)


def units_of(request: ResponsesRequest, ctx: Context, conversation: list[bytes | None] | None = None,
             elements: Elements | None = None) -> Iterator[bytes | None]:
    """The request's units (``app.prefix``), in order, encoded as they are drawn: its instructions,
    each item decoded before the input (``conversation``: the conversation's, when they are known
    already) and each input item as the client sent it (an id the server adds changes nothing
    decoded; ``elements``: the input as the body read found it, ``app.bodies``)."""
    yield unit(request.instructions, b"i")
    for where, items, trusted in ctx.before:
        if conversation is not None and where == f"conversation {ctx.conversation}":
            yield from conversation
            continue
        for item in items:
            yield item_unit(item, trusted, item.get("id") in ctx.own)
    raw = request.input
    sent: list[Any] = [raw] if isinstance(raw, str) else raw or []
    yield from each(elements, as_elements(elements, sent), "unit", _sent_unit)


@dataclass(frozen=True, slots=True)
class KeptItems:
    """A stored conversation's items as a request read them (``conversation_items``), each item's
    unit, and the store's mark of where the read ended — what the prefix service keeps of it — with
    what a request derives of the items, derived once per item as the conversation grows:
    ``objects`` (each item's object), ``own`` (toolwire's own copies by id) and ``reasoning`` (the
    places of the reasoning items that are a client's, whose stored copies may be read)."""

    conversation: StoredConversation
    items: list[StoredItem]
    units: list[bytes | None]
    mark: ItemsMark
    objects: list[dict[str, Any]] = field(default_factory=list)
    own: dict[str, StoredItem] = field(default_factory=dict)
    reasoning: list[int] = field(default_factory=list)
    #: how many of the items were kept from an earlier read (the rest read since it); 0: read whole
    base: int = 0

    def then(self, conversation: StoredConversation, items: list[StoredItem], units: list[bytes | None],
             mark: ItemsMark) -> KeptItems:
        """These items with ``items`` (and their ``units``) read after them; the earlier ones' derived
        values are taken as they are."""
        return _held(conversation, items, units, mark, self)


def _held(conversation: StoredConversation, items: list[StoredItem], units: list[bytes | None], mark: ItemsMark,
          before: KeptItems | None = None) -> KeptItems:
    base = len(before.items) if before is not None else 0
    objects = [item.item for item in items]
    own = {item.id: item for item in items if item.trusted}
    reasoning = [base + k for k, item in enumerate(items)
                 if not item.trusted and item.item.get("type") == "reasoning" and isinstance(item.item.get("id"), str)]
    if before is None:
        return KeptItems(conversation, items, units, mark, objects, own, reasoning)
    return KeptItems(conversation, [*before.items, *items], [*before.units, *units], mark, [*before.objects, *objects],
                     {**before.own, **own}, [*before.reasoning, *reasoning], base)


async def conversation_items(conversations: ConversationStore | None, prefix: PrefixService | None, conversation: str,
                             tenant: str, scope: bytes) -> KeptItems:
    """The tenant's stored conversation's items (a 404 when it has none of that id): what the prefix
    service kept of them and, from the store, those added since — or all of them, when nothing was
    kept or an item was deleted since — then kept again. Without the service, the items alone (no
    units: nothing is looked up)."""
    on = prefix is not None and prefix.enabled
    kept = prefix.recall_items(tenant, conversation, scope) if prefix is not None and on else None
    if not isinstance(kept, KeptItems):
        kept = None
    try:
        read = (await conversations.read_items(conversation, tenant, kept.mark if kept is not None else None)
                if conversations is not None else None)
    except StoreUnavailable as exc:
        raise store_unavailable(exc) from None
    if read is None:
        if kept is not None and prefix is not None:  # deleted (through another worker or replica)
            prefix.forget_items(tenant, conversation)
        raise conversation_not_found(conversation, "conversation")
    units = ([item_unit(item.item, False, item.trusted and item.item.get("id") == item.id) for item in read.items]
             if on else [])
    if kept is not None and not read.whole:
        held = kept.then(read.conversation, read.items, units, read.mark)
    else:
        held = _held(read.conversation, read.items, units, read.mark)
    if prefix is not None and on:
        # the items as parsed (about twice their encoding) and their units (about once)
        prefix.keep_items(tenant, conversation, scope, held, 3 * read.conversation.size + 64 * len(held.items))
    return held


async def context(responses: ResponseStore | None, conversations: ConversationStore | None, settings: Settings,
                  parsed: Parsed, tenant: str, prefix: PrefixService | None = None,
                  signer: ThinkingSigner | None = None) -> Context:
    """Read what the request builds on (see the module docstring); with the prefix service, what it
    kept of the conversation spares reading and decoding it again. A reasoning item handed back with
    a seal ``signer`` verifies is its sealed text (``decode``): outside a conversation (whose items
    take toolwire's stored copies) no stored copy of it is read — Codex, ``store: false``, hands
    its last answer's reasoning back every turn."""
    request, conversation = parsed.request, parsed.conversation
    ctx = Context(conversation=conversation, scope=scope_of(tenant, "responses"))
    previous = request.previous_response_id
    kept = (await kept_chain(responses, settings, prefix, previous, tenant, ctx.scope)
            if previous is not None and prefix is not None and prefix.enabled else None)
    if kept is not None:
        ctx.kept, ctx.facts = kept
    else:
        records = await history(responses, settings, previous, tenant)
        for n, record in enumerate(records):
            outputs = record.response.get("output") or []
            ctx.before.append((f"previous response {n} input", record.input, False))
            ctx.before.append((f"previous response {n} output", outputs, True))
            ctx.facts = ctx.facts.then(record.id, len(record.input) + len(outputs), 0)  # (walked before it is trusted)
    own: dict[str, StoredItem] = {}
    held: KeptItems | None = None
    if conversation is not None:
        held = await conversation_items(conversations, prefix, conversation, tenant, ctx.scope)
        own = held.own
        ctx.own, ctx.held_items = own.keys(), held.objects
        decoded = prefix.recall_conversation(tenant, conversation, ctx.scope) if prefix is not None else None
        if decoded is not None and isinstance(decoded.chain, ConversationFacts) and decoded.chain.hold(held):
            ctx.kept = decoded  # its items as its last response left them: decoded then
        else:
            ctx.before.append((f"conversation {conversation}", held.objects, False))
    ctx.input = parsed.input
    if held is not None:
        _fits(ctx, held.conversation, settings)
    if prefix is not None and prefix.enabled and ctx.kept is None:
        ctx.recall = prefix.recall(ctx.scope, units_of(request, ctx, held.units if held is not None else None,
                                                       parsed.elements))
    found = ctx.recall

    taken = found.takeable() if found is not None else []  # unit by unit: decoded before (``Recall.segment``)

    def copied(item: dict[str, Any], index: int) -> bool:
        """Whether the stored copy of reasoning item ``item`` (unit ``index``) may be read: not for an
        item decoded before (taken), nor for one whose seal says its text (outside a conversation)."""
        if item.get("type") != "reasoning" or not isinstance(item.get("id"), str):
            return False
        if index < len(taken) and taken[index] is not None:
            return False
        return conversation is not None or signer is None or not _sealed(item, signer)

    elements, raw, n = parsed.elements, request.input, len(ctx.input)
    sent = as_elements(elements, raw) if isinstance(raw, list) and len(raw) == n else ctx.input
    kinds = list(each(elements, sent, "kind", _kind))  # (worked out once per item of an agent's input)
    references = [ctx.input[k]["id"] for k in compress(range(n), map(eq, kinds, repeat(_REFERENCE)))]
    wanted = [*references]
    at = 1 + sum(len(items_before) for _, items_before, _ in ctx.before)
    for k in compress(range(n), map(eq, kinds, repeat("reasoning"))):
        if copied(ctx.input[k], at + k):
            wanted.append(ctx.input[k]["id"])
    at = 1
    for _, items_before, trusted in ctx.before:
        if not trusted:  # (of a conversation's items, only its clients' reasoning items can be wanted)
            places = held.reasoning if held is not None and items_before is held.objects else range(len(items_before))
            wanted += [items_before[k]["id"] for k in places
                       if items_before[k].get("id") not in own and copied(items_before[k], at + k)]
        at += len(items_before)
    stored = await found_items(responses, wanted, tenant, settings)
    if references:
        ctx.input = resolved(ctx.input, stored, "input")
    ctx.stored = {**stored, **own}  # the conversation's own items are toolwire's copies
    return ctx


#: an input item's kind (``_kind``) when it is an ``item_reference`` by id (replaced by the item)
_REFERENCE = "item_reference"


def _kind(item: Any, _: bytes | None) -> str | None:
    """What ``context`` looks for in an input item: a reasoning item (its stored copy may be read),
    an ``item_reference`` by id (``_REFERENCE``), or neither (``None``)."""
    if not isinstance(item, dict):
        return None
    kind = item.get("type")
    if kind == "reasoning":
        return "reasoning"
    return _REFERENCE if kind == _REFERENCE and isinstance(item.get("id"), str) else None


def _sealed(item: dict[str, Any], signer: ThinkingSigner) -> bool:
    """Whether a reasoning item carries a seal ``signer`` made (its text is the sealed one)."""
    sealed = item.get("encrypted_content")
    return isinstance(sealed, str) and sealed.startswith(SEALED) and signer.unseal(sealed) is not None


def _fits(ctx: Context, held: StoredConversation, settings: Settings) -> None:
    """A conversation that could not take this request's input is a 400 before anything is generated
    (as the store counts it: its items and its own fields)."""
    limits = conversation_limits(settings)
    if held.items + len(ctx.input) > limits.items:
        raise over_limit("items", settings, "conversation", "conversation")
    size = held.size + sum(len(StoredItem(i).encode()) for i in ctx.input)
    if size > min(limits.bytes, settings.response_store_max_bytes):
        raise over_limit("bytes", settings, "conversation", "conversation")
