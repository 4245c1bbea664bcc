"""What a response builds on, read from the store, and what it leaves there.

``context(…)`` reads, for one ``POST /v1/responses``:

* the stored chain of a ``previous_response_id`` (``history``), or the items of a ``conversation``
  (they come first in the prompt; the two together are a 400, as OpenAI answers);
* the stored items the request names by id — each ``item_reference`` (replaced by the item it
  refers to, within the tenant's own stored responses and conversations; an id that cannot be
  found is a 400 naming it), and each reasoning item, which reaches the prompt only as
  toolwire's own copy of it (``Decoder``: a client's reasoning is never the model's thinking).

``Keeper`` stores the finished response (``store`` not false) and appends its input and output
items to its conversation. A store or conversation bound that fails after the answer was made — or
a response grown past ``--max-stored-response-bytes`` by its output — never costs the client the
answer: the failure is handed back for the face to report.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from app.api.responses.decode import normalised_input
from app.api.responses.history import history, store_unavailable
from app.api.responses.protocol import ResponsesRequest
from app.errors import APIError, bad_request
from app.settings import Settings
from app.state import (
    ChainLimits,
    ConversationLimits,
    ConversationStore,
    ResponseStore,
    StoredItem,
    StoredResponse,
    StoreUnavailable,
)

log = logging.getLogger("toolwire")


def conversation_id(raw: str | dict[str, Any] | None) -> str | None:
    """The ``conversation`` parameter's id (a string, or ``{"id": …}``)."""
    if raw is None:
        return None
    value = raw.get("id") if isinstance(raw, dict) else raw
    if not isinstance(value, str) or not value:
        raise bad_request("conversation: expected a conversation id, or an object with its id", "conversation")
    return value


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


def _references(items: list[dict[str, Any]]) -> list[str]:
    return [item["id"] for item in items if item.get("type") == "item_reference" and isinstance(item.get("id"), str)]


def _reasoning_ids(items: list[dict[str, Any]]) -> list[str]:
    return [item["id"] for item in items if item.get("type") == "reasoning" and isinstance(item.get("id"), str)]


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


@dataclass
class Context:
    """What one response builds on (see the module docstring). ``before``: item lists decoded ahead
    of the input, each with whether toolwire wrote it; ``input``: the request's items, references
    replaced; ``stored``: stored copies by id (the decoder trusts reasoning only through these)."""

    before: list[tuple[str, list[dict[str, Any]], bool]] = field(default_factory=list)
    input: list[dict[str, Any]] = field(default_factory=list)
    stored: dict[str, StoredItem] = field(default_factory=dict)
    conversation: str | None = None


async def context(responses: ResponseStore | None, conversations: ConversationStore | None, settings: Settings,
                  request: ResponsesRequest, tenant: str) -> Context:
    """Read what the request builds on (see the module docstring)."""
    conversation = conversation_id(request.conversation)
    if conversation is not None and request.previous_response_id is not None:
        raise bad_request("Mutually exclusive parameters: Ensure you are only providing one of: "
                          "'previous_response_id' or 'conversation'.", "conversation", code="mutually_exclusive_parameters")
    ctx = Context(conversation=conversation)
    chain = await history(responses, settings, request.previous_response_id, tenant)
    for n, (inputs, outputs) in enumerate(chain):
        ctx.before.append((f"previous response {n} input", inputs, False))
        ctx.before.append((f"previous response {n} output", outputs, True))
    own: dict[str, StoredItem] = {}
    if conversation is not None:
        try:
            items = await conversations.all_items(conversation, tenant) if conversations is not None else None
        except StoreUnavailable as exc:
            raise store_unavailable(exc) from None
        if items is None:
            raise conversation_not_found(conversation, "conversation")
        own = {item.id: item for item in items if item.trusted}
        ctx.before.append((f"conversation {conversation}", [item.item for item in items], False))
    ctx.input = normalised_input(request.input)
    if conversation is not None:
        _fits(ctx, items or [], settings)
    wanted = _references(ctx.input) + _reasoning_ids(ctx.input)
    for _, items_before, trusted in ctx.before:
        if not trusted:
            wanted += [key for key in _reasoning_ids(items_before) if key not in own]
    stored = await found_items(responses, wanted, tenant, settings)
    ctx.input = resolved(ctx.input, stored, "input")
    ctx.stored = {**stored, **own}  # the conversation's own items are toolwire's copies
    return ctx


def _fits(ctx: Context, items: list[StoredItem], settings: Settings) -> None:
    """A conversation that could not take this request's input is a 400 before anything is generated."""
    limits = conversation_limits(settings)
    if len(items) + len(ctx.input) > limits.items:
        raise over_limit("items", settings, "conversation", "conversation")
    size = sum(len(item.encode()) for item in items) + sum(len(StoredItem(i).encode()) for i in ctx.input)
    if size > min(limits.bytes, settings.response_store_max_bytes):
        raise over_limit("bytes", settings, "conversation", "conversation")


class Keeper:
    """Stores a finished response (when ``store`` is given) and adds its items to its conversation;
    called with the final response object, it answers the error that kept either from happening, or
    ``None``. ``stored``: whether the response itself was stored; ``warning``: what went wrong, for
    a header."""

    def __init__(self, responses: ResponseStore | None, conversations: ConversationStore | None, keep: bool,
                 ctx: Context, settings: Settings, tenant: str, response_id: str, previous: str | None) -> None:
        self.responses = responses
        self.conversations = conversations
        self.keep = keep
        self.ctx = ctx
        self.settings = settings
        self.tenant = tenant
        self.response_id = response_id
        self.previous = previous
        self.stored = False
        self.warning = ""

    async def __call__(self, final: dict[str, Any]) -> APIError | None:
        if self.responses is None or self.conversations is None:
            return None
        if self.keep:
            record = StoredResponse(self.response_id, "", final, self.ctx.input, self.previous)
            limit = self.settings.max_stored_response_bytes
            if len(record.encode()) > limit:
                log.warning("response %s not stored: larger than --max-stored-response-bytes (%d)", self.response_id,
                            limit)
                self.warning = "response not stored: larger than a stored response may be (--max-stored-response-bytes)"
                return APIError(413, f"the response was not stored: with its output it is larger than a stored "
                                f"response may be ({limit} bytes, --max-stored-response-bytes); it cannot be "
                                "retrieved or continued", code="stored_response_too_large")
            try:
                await self.responses.put(record, self.tenant)
            except StoreUnavailable as exc:
                self.warning = "response not stored: the response store is unavailable"
                return store_unavailable(exc)
            self.stored = True
        if self.ctx.conversation is None:
            return None
        problem = await self._append(final)
        if problem is not None:
            self.warning = f"response not added to conversation {self.ctx.conversation}: {problem.message}"
        return problem

    async def _append(self, final: dict[str, Any]) -> APIError | None:
        assert self.conversations is not None and self.ctx.conversation is not None
        items = [self._own(item) or StoredItem(conversation_item(item)) for item in self.ctx.input]
        items += [StoredItem(conversation_item(item), True) for item in final.get("output") or ()]
        try:
            appended = await self.conversations.add_items(self.ctx.conversation, items, self.tenant,
                                                  conversation_limits(self.settings), skip_existing=True)
        except StoreUnavailable as exc:
            return store_unavailable(exc)
        if appended.conversation is None:
            return conversation_not_found(self.ctx.conversation)
        if appended.over is not None:
            return over_limit(appended.over, self.settings, "conversation", "conversation")
        return None

    def _own(self, item: dict[str, Any]) -> StoredItem | None:
        """Toolwire's stored copy of a reasoning item handed back by id (never the client's text)."""
        own = self.ctx.stored.get(item.get("id", "")) if item.get("type") == "reasoning" else None
        return own if own is not None and own.trusted and own.item.get("type") == "reasoning" else None
