"""``/v1/conversations``: the Conversations API (the openai SDK's ``conversations`` resource, the
Agents SDK's ``OpenAIConversationsSession``).

A conversation is stored like a response — in the same store, owned by the API key that made it
(another key gets what a missing id gets: 404), within its bounds (``--conversation-max-items``,
``--conversation-max-bytes``: a write past one is refused whole, a 400 naming it) — and its items
are Responses input items: checked as ``/v1/responses`` decodes them (a bad item is a 400 naming
it), ``item_reference`` items replaced by the stored items they refer to, and a reasoning item the
client adds kept as the client's, unless its id is one toolwire stored reasoning under (then
toolwire's own copy is kept: only that reaches a prompt as the model's thinking). Responses made
with ``conversation`` add their input and output items here (``app.api.responses.context``).
"""

from __future__ import annotations

import time
from typing import Any

from starlette.responses import JSONResponse, Response

from app.api.answer import Exchange
from app.api.conversations.protocol import PageQuery, batch, body_object, includes, metadata, page_query
from app.api.responses.context import (
    conversation_item,
    conversation_limits,
    conversation_not_found,
    found_items,
    over_limit,
    resolved,
)
from app.api.responses.decode import Decoder, normalised_input
from app.api.responses.encode import new_id
from app.api.responses.history import store_unavailable, stores_of
from app.api.responses.protocol import ToolSet
from app.errors import APIError, bad_request
from app.services import Keeping
from app.state import Appended, ConversationStore, StoredConversation, StoredItem, StoreUnavailable
from app.thinking_signature import ThinkingSigner

ENCRYPTED = "reasoning.encrypted_content"


def item_not_found(conversation: str, item: str) -> APIError:
    return APIError(404, f"Item with id {item!r} not found in conversation {conversation!r}.", code="not_found")


async def _call(work: Any) -> Any:
    """A store call, its failure a 503 ``store_unavailable``."""
    try:
        return await work
    except StoreUnavailable as exc:
        raise store_unavailable(exc) from None


def _conversations(ex: Exchange[Keeping]) -> ConversationStore:
    return stores_of(ex.services).conversations


def _path(ex: Exchange[Keeping], name: str) -> str:
    assert ex.request is not None
    return str(ex.request.path_params[name])


def _query(ex: Exchange[Keeping]) -> Any:
    assert ex.request is not None
    return ex.request.query_params


def _reasoning_text(item: dict[str, Any]) -> str:
    for name in ("content", "summary"):
        parts = item.get(name)
        if isinstance(parts, list) and parts:
            return "".join(p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def view(item: StoredItem, include: set[str], signer: ThinkingSigner) -> dict[str, Any]:
    """An item as the API shows it; with ``reasoning.encrypted_content``, toolwire's own reasoning
    carries its sealed text (a client without state hands it back that way)."""
    if ENCRYPTED in include and item.trusted and item.item.get("type") == "reasoning":
        return {**item.item, "encrypted_content": signer.seal(_reasoning_text(item.item))}
    return item.item


def _listing(items: list[dict[str, Any]], has_more: bool) -> JSONResponse:
    return JSONResponse({"object": "list", "data": items, "first_id": items[0].get("id") if items else None,
                         "last_id": items[-1].get("id") if items else None, "has_more": has_more})


async def checked_items(raw: list[dict[str, Any]], ex: Exchange[Keeping], where: str) -> list[StoredItem]:
    """A client's items as a conversation keeps them (see the module docstring)."""
    items = normalised_input(raw)
    refs = [i["id"] for i in items if i.get("type") in ("item_reference", "reasoning") and isinstance(i.get("id"), str)]
    stored = await found_items(stores_of(ex.services).responses, refs, ex.tenant, ex.settings)
    items = resolved(items, stored, where)
    Decoder(ToolSet(), ex.signer).decode(items, where)  # a 400 naming any item /v1/responses could not read
    out = []
    for item in items:
        own = stored.get(item["id"]) if item.get("type") == "reasoning" and isinstance(item.get("id"), str) else None
        if own is not None and own.trusted and own.item.get("type") == "reasoning":
            out.append(own)  # toolwire's own reasoning (referenced, or handed back by its id)
        else:
            out.append(StoredItem(conversation_item(item)))
    return out


def _refused(appended: Appended, ex: Exchange[Keeping], where: str) -> None:
    if appended.duplicate is not None:
        raise bad_request(f"{where}: an item with id {appended.duplicate!r} is already in the conversation", where,
                          code="item_already_in_conversation")
    if appended.over is not None:
        raise over_limit(appended.over, ex.settings, where, where)


# ------------------------------------------------------------------------------------ routes


async def create_conversation(body: Any, ex: Exchange[Keeping]) -> Response:
    """``POST /v1/conversations``: a new conversation, with up to 20 items and metadata."""
    request = body_object(body)
    meta = metadata(request.get("metadata"))
    items = await checked_items(batch(request.get("items")), ex, "items")
    made = StoredConversation(new_id("conv_"), int(time.time()), meta)
    appended = await _call(_conversations(ex).create(made, items, ex.tenant, conversation_limits(ex.settings)))
    _refused(appended, ex, "items")
    return JSONResponse(made.view())


async def retrieve_conversation(ex: Exchange[Keeping]) -> Response:
    conversation = _path(ex, "id")
    found = await _call(_conversations(ex).get(conversation, ex.tenant))
    if found is None:
        raise conversation_not_found(conversation)
    return JSONResponse(found.view())


async def update_conversation(body: Any, ex: Exchange[Keeping]) -> Response:
    """``POST /v1/conversations/{id}``: its metadata replaced."""
    request = body_object(body)
    if "metadata" not in request:
        raise bad_request("metadata: Field required", "metadata")
    conversation = _path(ex, "id")
    appended = await _call(_conversations(ex).update(conversation, ex.tenant, metadata(request["metadata"]),
                                                          conversation_limits(ex.settings)))
    if appended.conversation is None:
        raise conversation_not_found(conversation)
    _refused(appended, ex, "metadata")
    return JSONResponse(appended.conversation.view())


async def delete_conversation(ex: Exchange[Keeping]) -> Response:
    """``DELETE /v1/conversations/{id}``: the conversation and its items (stored responses that
    made some of them keep their own copies)."""
    conversation = _path(ex, "id")
    if not await _call(_conversations(ex).delete(conversation, ex.tenant)):
        raise conversation_not_found(conversation)
    ex.services.prefix.forget_items(ex.tenant, conversation)
    return JSONResponse({"id": conversation, "object": "conversation.deleted", "deleted": True})


async def list_items(ex: Exchange[Keeping]) -> Response:
    """``GET /v1/conversations/{id}/items``: a page (``after``, ``limit``, ``order``; newest first)."""
    conversation = _path(ex, "id")
    query: PageQuery = page_query(_query(ex))
    page = await _call(_conversations(ex).list_items(conversation, ex.tenant, query.after, query.limit,
                                                     query.descending))
    if page is None:
        raise conversation_not_found(conversation)
    include, signer = includes(_query(ex)), ex.signer
    return _listing([view(item, include, signer) for item in page.items], page.has_more)


async def add_items(body: Any, ex: Exchange[Keeping]) -> Response:
    """``POST /v1/conversations/{id}/items``: up to 20 items added at the end, listed back."""
    conversation = _path(ex, "id")
    items = await checked_items(batch(body_object(body).get("items")), ex, "items")
    appended = await _call(_conversations(ex).add_items(conversation, items, ex.tenant,
                                                        conversation_limits(ex.settings)))
    if appended.conversation is None:
        raise conversation_not_found(conversation)
    _refused(appended, ex, "items")
    include, signer = includes(_query(ex)), ex.signer
    return _listing([view(item, include, signer) for item in items], False)


async def retrieve_item(ex: Exchange[Keeping]) -> Response:
    conversation, item_id = _path(ex, "id"), _path(ex, "item_id")
    found, item = await _call(_conversations(ex).get_item(conversation, item_id, ex.tenant))
    if found is None:
        raise conversation_not_found(conversation)
    if item is None:
        raise item_not_found(conversation, item_id)
    return JSONResponse(view(item, includes(_query(ex)), ex.signer))


async def delete_item(ex: Exchange[Keeping]) -> Response:
    """``DELETE /v1/conversations/{id}/items/{item_id}``: the conversation, without the item."""
    conversation, item_id = _path(ex, "id"), _path(ex, "item_id")
    found, deleted = await _call(_conversations(ex).delete_item(conversation, item_id, ex.tenant))
    if found is None:
        raise conversation_not_found(conversation)
    if not deleted:
        raise item_not_found(conversation, item_id)
    return JSONResponse(found.view())
