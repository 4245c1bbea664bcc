"""``/v1/responses``: the OpenAI Responses API face's routes (Codex CLI, the Agents SDK's default model).

``POST /v1/responses`` reads the request whole (``parse``), then what it builds on: the stored chain
or conversation and the stored items it refers to (``context``); decodes it into the shared ``Ask``
(``decode``) and encodes the parser events as Responses items (``encode``) — streamed as
``response.*`` events, or one response object — and stores the response (``store`` not false) and
adds its items to its conversation (``keep``).
``GET`` / ``DELETE /v1/responses/{id}`` and ``GET /v1/responses/{id}/input_items`` read the store.
A background response (``background: true``) is generated detached from the request, and polled,
resumed (``GET …?stream=true``) and cancelled (``POST …/cancel``) on any replica: ``background``,
``follow``.

A store that fails after the answer was generated never costs the client the answer: a stream ends
with ``error`` and ``response.failed`` (the output included); a whole answer is returned with an
``X-Toolwire-Warning`` header (and ``store: false`` when the response itself was not stored). A
response larger than ``--max-stored-response-bytes`` is not stored either: refused (413) before
generating when its input alone is, answered as for a failed store when its output takes it over.
"""

from __future__ import annotations

import logging
from typing import Any

from starlette.responses import JSONResponse, Response

from app.api import query
from app.api.answer import Exchange, respond
from app.api.responses import background, follow
from app.api.responses.context import context
from app.api.responses.decode import Decoder, responses_ask
from app.api.responses.encode import ResponseEvents, ResponseItems, encoded_size, finished_response, new_id, shell
from app.api.responses.history import not_found, store_unavailable, stored, stores_of
from app.api.responses.keep import Chained, Keeper
from app.api.responses.parse import parse_request
from app.errors import APIError
from app.pipeline.choices import Choices
from app.pipeline.run import Finished
from app.services import Responding
from app.state import StoreUnavailable
from parsers.events import Event
from parsers.fold import CallHolder

log = logging.getLogger("toolwire")


async def create_response(body: Any, ex: Exchange[Responding]) -> Response:
    """``POST /v1/responses``: a stream of ``response.*`` events, or one response object."""
    signer = ex.signer
    stores = ex.services.stores
    responses, conversations = (stores.responses, stores.conversations) if stores is not None else (None, None)
    tenant = ex.tenant
    parsed = parse_request(body, ex.settings, ex.tenant, ex.services.prefix, ex.elements)
    request, tools = parsed.request, parsed.tools
    prefix = ex.services.prefix
    ctx = await context(responses, conversations, ex.settings, parsed, tenant, prefix, signer)
    decoder = Decoder(tools, signer, ctx.stored, ctx.own)  # a client's items in the chain are never trusted
    ask = responses_ask(parsed, ctx, decoder, prefix)
    headers = {}
    if tools.skipped:
        skipped = ", ".join(sorted(set(tools.skipped)))
        log.warning("responses: hosted tools left out of the prompt (not run by toolwire): %s", skipped)
        headers["X-Toolwire-Warning"] = f"hosted tools not available, left out: {skipped}"
    response_id = new_id("resp_")
    save = Keeper(responses, conversations, request.store is not False, ctx, ex.settings, tenant, response_id,
                  request.previous_response_id, Chained(prefix, tenant, ctx, ask, bool(request.instructions), decoder))
    # a background response is stored by its run; only its items still go to its conversation
    added = (Keeper(responses, conversations, False, ctx, ex.settings, tenant, response_id, None)
             if request.background and ctx.conversation else None)
    head = shell(request, response_id, (await ex.ready()).name, ctx.conversation)
    stored = responses is not None and request.store is not False
    # what the response echoes, and the input where something stores it, can be encoded at all
    size = encoded_size(head, ctx.input if stored or ctx.conversation is not None else [])
    limit = ex.settings.max_stored_response_bytes
    if stored and size > limit:  # it could never be stored
        raise APIError(413, f"this response would be stored with {size} bytes of input (instructions and tools "
                       f"included), more than a stored response may hold ({limit}, --max-stored-response-bytes); "
                       "send less input, or store: false", param="input", code="stored_response_too_large")
    include = set(request.include or ())
    summary = bool(request.reasoning and (request.reasoning.summary or request.reasoning.generate_summary))

    def items_for(events: bool) -> ResponseItems:
        return ResponseItems(tools.by_offered_name, events=events, summary=summary,
                             encrypted="reasoning.encrypted_content" in include, signer=signer)

    def events() -> ResponseEvents:  # a stream's writer, made while the backend works on the first token
        return ResponseEvents(head, items_for(True), save)

    async def build(results: list[tuple[list[Event], Finished]], total: Finished, _: Choices) -> Response:
        built = items_for(False)
        built.feed(CallHolder()(results[0][0]))  # a call counts once complete; an unfinished one is its text
        final = finished_response(head, built, total)
        if await save(final) is not None:
            final["store"] = save.stored
            headers["X-Toolwire-Warning"] = "; ".join(filter(None, (headers.get("X-Toolwire-Warning"), save.warning)))
        return JSONResponse(final, headers=headers)

    later = None
    if request.background:  # generated detached from the request, stored by its run
        later = background.later(ex, head, items_for(True), ctx.input, request.previous_response_id,
                                 bool(request.stream), added, headers)
    return await respond(ex, ask, stream=bool(request.stream), early=events, build=build, later=later, headers=headers)


async def retrieve_response(ex: Exchange[Responding]) -> Response:
    """The stored response (a background one as its run has it), or with ``stream=true`` its events
    (after ``starting_after``). ``include_obfuscation`` is read (a malformed one is a 400) and has no
    effect: toolwire's events carry no padding."""
    response_id = _path_id(ex)
    assert ex.request is not None
    params = ex.request.query_params
    streamed = query.flag(params, "stream")
    after = query.number(params, "starting_after", None)
    query.flag(params, "include_obfuscation", True)
    if streamed:
        return await follow.resume(ex, response_id, after)
    return JSONResponse(await follow.current(ex, response_id))


async def cancel_response(ex: Exchange[Responding]) -> Response:
    return JSONResponse(await follow.cancel(ex, _path_id(ex)))


async def delete_response(ex: Exchange[Responding]) -> Response:
    response_id = _path_id(ex)
    responses = stores_of(ex.services).responses
    await follow.before_delete(ex, response_id)
    try:
        deleted = await responses.delete(response_id, ex.tenant)
        ex.services.prefix.forget_response(ex.tenant, response_id)
    except StoreUnavailable as exc:
        raise store_unavailable(exc) from None
    if not deleted:
        raise not_found(response_id)
    return JSONResponse({"id": response_id, "object": "response", "deleted": True})


async def input_items(ex: Exchange[Responding]) -> Response:
    assert ex.request is not None
    params = ex.request.query_params
    order = query.choice(params, "order", "desc", ("asc", "desc"))
    after = query.text(params, "after")
    limit = query.number(params, "limit", 20, 1, 100)
    assert limit is not None
    items = list((await stored(stores_of(ex.services).responses, _path_id(ex), ex.tenant)).input)
    if order == "desc":
        items.reverse()
    if after is not None:
        ids = [i.get("id") for i in items]
        items = items[ids.index(after) + 1:] if after in ids else []
    page = items[:limit]
    return JSONResponse({"object": "list", "data": page, "first_id": page[0].get("id") if page else None,
                         "last_id": page[-1].get("id") if page else None, "has_more": len(items) > limit})


def _path_id(ex: Exchange[Responding]) -> str:
    assert ex.request is not None
    return str(ex.request.path_params["id"])
