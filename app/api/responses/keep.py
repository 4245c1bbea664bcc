"""What a finished response leaves: itself in the store, its items in its conversation, and the
chain it ends, decoded, with the prefix service.

``Keeper`` stores the finished response (``store`` not false) and appends its input and output
items to its conversation (``context``'s bounds and item shape). A store or conversation bound that
fails after the answer was made — or a response grown past ``--max-stored-response-bytes`` by its
output — never costs the client the answer: the failure is handed back for the face to report.
Once stored, ``Chained`` hands the chain it ends to the prefix service (``app.prefix``) — or, once
its items are in its conversation, what the conversation's items now decode to.
"""

from __future__ import annotations

import logging
from typing import Any

from app.api.responses.context import (
    Context,
    ConversationFacts,
    conversation_item,
    conversation_limits,
    conversation_not_found,
    over_limit,
)
from app.api.responses.decode import Decoder, closes_run
from app.api.responses.history import store_unavailable
from app.conversation import Turn
from app.errors import APIError
from app.pipeline.ask import Ask
from app.pipeline.validate import MAX_ARGUMENT_NESTING, arguments_nesting
from app.prefix import PrefixService
from app.settings import Settings
from app.state import ConversationStore, ResponseStore, StoredItem, StoredResponse, StoreUnavailable
from app.templates.resume import RenderState

log = logging.getLogger("toolwire")


class Chained:
    """What a finished response leaves the prefix service (``app.prefix``): the chain it ends,
    decoded — the request's turns but its instructions, and its output's — so a continuation from
    it starts there (``PrefixService.keep_response``); for a conversation's response (its stored
    chain is not the conversation), the same turns as what the conversation's items decode to
    once the response added its own (``conversation``: ``keep_conversation``). Neither when
    decoding read stored copies (a store that changes would decode otherwise), nor for a request
    that continued nothing and was its conversation's first sighting (``app.prefix``: a one-off
    request costs what it costs without the service; a continuation of it reads its one link
    from the store, and is kept)."""

    def __init__(self, prefix: PrefixService, tenant: str, ctx: Context, ask: Ask, instructions: bool,
                 decoder: Decoder) -> None:
        self.prefix, self.tenant, self.ctx, self.ask = prefix, tenant, ctx, ask
        self.instructions, self.decoder = instructions, decoder

    def __call__(self, response_id: str, final: dict[str, Any], size: int) -> None:
        """Keep the chain ``response_id`` (stored in ``size`` bytes, ``final`` its response object) ends."""
        ctx = self.ctx
        if ctx.conversation is not None:
            return
        output = final.get("output") or []
        decoded = self._decoded(output)
        if decoded is not None:
            turns, render, plain = decoded
            self.prefix.keep_response(self.tenant, response_id, ctx.scope, turns, render,
                                      ctx.facts.then(response_id, len(ctx.input) + len(output), size),
                                      64 * len(ctx.facts.ids), ctx.kept, plain)

    def conversation(self, final: dict[str, Any], added: list[str]) -> None:
        """Keep what the conversation decodes to now that the response (``final``) added its input and
        output to it (``added``: the ids of the items added, in order) — when the conversation's
        items decode, one list, as they did in two (its earlier items, then the input: each list
        closes a run of assistant items, one list only at its end) and every item was added as sent."""
        ctx = self.ctx
        output = final.get("output") or []
        if ctx.conversation is None or len(added) != len(ctx.input) + len(output):
            return
        if not (_joined(ctx.held_items, ctx.input) and _joined(ctx.input, output)):
            return  # (a run of assistant items across a place where decoding in parts closed it)
        decoded = self._decoded(output)
        if decoded is not None:
            turns, render, plain = decoded
            self.prefix.keep_conversation(self.tenant, ctx.conversation, ctx.scope, turns, render,
                                          ConversationFacts(len(ctx.held_items), tuple(added)), 64 * len(added), ctx.kept,
                                          plain)

    def _decoded(self, output: list[dict[str, Any]]) -> tuple[list[Turn], RenderState | None, frozenset[int]] | None:
        """The turns the request's items and ``output`` decode to (its instructions left out), the
        render to continue and the turns known plain — or ``None``: nothing to keep."""
        ctx, ask = self.ctx, self.ask
        if self.decoder.looked or not self.prefix.enabled:
            return None
        if ask.prefix is None and ctx.kept is None and not ctx.before:
            return None  # a first sighting, continuing nothing
        out = Decoder(self.decoder.tools, self.decoder.signer)
        try:
            out.decode(output, "output", trusted=True)
        except APIError:
            return None  # (its next request reads and decodes it, and says what is wrong)
        if any(arguments_nesting(call.arguments) > MAX_ARGUMENT_NESTING for turn in out.turns for call in turn.calls):
            return None  # a continuation checks what a fresh decode would: it would refuse this
        turns = [*ask.turns[1 if self.instructions else 0:], *out.turns]
        note = ask.prefix
        if note is not None and note.epoch != self.prefix.epoch:
            return None  # made for the model served before (``PrefixService.serving``)
        render = note.resume.state if note is not None else None
        plain = note.plain(turns) if note is not None else frozenset()  # (not the output's: never scanned)
        return turns, render, plain


def _joined(before: list[dict[str, Any]], after: list[dict[str, Any]]) -> bool:
    """Whether ``before`` and ``after`` decode in one list as in two (each list closes the run of
    assistant items it ends with): one of them is empty, ``before`` ends with an item that closes a
    run, or ``after`` begins with one (an item decoded as a turn of its own: a tool's result, a
    message not the assistant's)."""
    return not before or not after or closes_run(before[-1]) or closes_run(after[0])


class Keeper:
    """Stores a finished response (when ``store`` is given) and adds its items to its conversation;
    called with the final response object, it answers the error that kept either from happening, or
    ``None``. ``stored``: whether the response itself was stored; ``warning``: what went wrong, for
    a header. Once stored, ``chained`` hands the chain it ends to the prefix service."""

    def __init__(self, responses: ResponseStore | None, conversations: ConversationStore | None, keep: bool,
                 ctx: Context, settings: Settings, tenant: str, response_id: str, previous: str | None,
                 chained: Chained | None = None) -> None:
        self.responses = responses
        self.conversations = conversations
        self.keep = keep
        self.ctx = ctx
        self.settings = settings
        self.tenant = tenant
        self.response_id = response_id
        self.previous = previous
        self.chained = chained
        self.stored = False
        self.warning = ""

    async def __call__(self, final: dict[str, Any]) -> APIError | None:
        if self.responses is None or self.conversations is None:
            return None
        if self.keep:
            record = StoredResponse(self.response_id, "", final, self.ctx.input, self.previous)
            limit = self.settings.max_stored_response_bytes
            size = record.size()  # (its parts made once: stored as counted)
            if size > limit:
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
            if self.chained is not None:
                self.chained(self.response_id, final, size)
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
        if self.chained is not None:
            self.chained.conversation(final, appended.added)
        return None

    def _own(self, item: dict[str, Any]) -> StoredItem | None:
        """Toolwire's stored copy of a reasoning item handed back by id (never the client's text)."""
        own = self.ctx.stored.get(item.get("id", "")) if item.get("type") == "reasoning" else None
        return own if own is not None and own.trusted and own.item.get("type") == "reasoning" else None
