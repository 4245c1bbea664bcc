"""A Messages API request's JSON body → the typed request (``Conversation``, ``MessagesRequest``).

Its lists are counted against the limits before anything decodes them (``count``); then the
prefix service (``app.prefix``) is asked, once, what it has of the conversation — its units are
the system prompt (billing lines and all: a unit is its exact bytes) and each message, whose
decoding depends on it alone (its thinking blocks' signatures are the tenant's) — and only the
messages it does not know are validated (and the tool definitions, unless they are the same bytes as
an earlier request's of the conversation). What it found rides on the request to the decoder
(``app.api.messages.decode``).
"""

from __future__ import annotations

from itertools import chain
from operator import itemgetter
from typing import Any, TypeVar

from pydantic import ValidationError

from app.api.limits import raw_items, raw_list, too_many
from app.api.messages.protocol import Conversation, first_problem, invalid
from app.api.protocol import validated_but_known
from app.bodies import Elements, each, total
from app.prefix import PrefixService, Recall, scope_of, unit
from app.settings import Settings

C = TypeVar("C", bound=Conversation)
#: a content block's prompt caching hint, as a message's JSON holds it (a key: quotes inside a
#: JSON string are escaped)
_CACHE_CONTROL = b'"cache_control":'


def message_unit(message: Any, data: bytes | None = None) -> bytes | None:
    """A message's unit (``app.prefix``) without its content blocks' ``cache_control``: a prompt
    caching hint nothing here reads (blocks' unknown fields are ignored), which Claude Code moves to
    the newest block every turn — the message it left is the same message a turn later. ``data``:
    the message's JSON, where it is known (``app.bodies``)."""
    if data is not None and _CACHE_CONTROL not in data:
        return unit(message, data=data)
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, list) and any(isinstance(block, dict) and "cache_control" in block for block in content):
        message = {**message, "content": [
            {k: v for k, v in block.items() if k != "cache_control"}
            if isinstance(block, dict) and "cache_control" in block else block for block in content]}
    return unit(message)


def _blocks(message: Any) -> int:
    """A message's content blocks."""
    return raw_items([message], "content")


def _inner_blocks(message: Any) -> int:
    """The blocks inside a message's blocks (a tool result's content)."""
    content = message.get("content") if isinstance(message, dict) else None
    return raw_items(content, "content") if isinstance(content, list) else 0


def count(body: dict[str, Any], settings: Settings, elements: Elements | None = None) -> list[Any]:
    """The request's lists against the limits, on the raw JSON (before any model decodes them):
    messages, tools, and content blocks — system blocks, each message's blocks and the blocks
    inside its tool results (``elements``: the messages as the body read found them, whose counts
    it keeps for the next turn). The messages, as a list (empty: not one)."""
    messages = raw_list(body, "messages")
    too_many(len(messages), settings.max_messages, "messages", "--max-messages", "messages")
    too_many(len(raw_list(body, "tools")), settings.max_tools, "tools", "--max-tools", "tools")
    system = len(raw_list(body, "system"))
    blocks = system + total(elements, messages, "blocks", _blocks)
    too_many(blocks, settings.max_input_items, "content blocks", "--max-input-items", "messages")
    blocks += total(elements, messages, "inner blocks", _inner_blocks)
    too_many(blocks, settings.max_input_items, "content blocks", "--max-input-items", "messages")
    return messages


def parse(model: type[C], body: Any, settings: Settings, tenant: str = "",
          prefix: PrefixService | None = None, elements: Elements | None = None) -> C:
    """The request body as ``model`` (a located 400 when it is not one, or holds more than the
    limits; an error is the whole request's, whichever messages were validated), with what
    ``prefix`` has of ``tenant``'s conversation as its ``_recall`` (see the module docstring);
    ``elements``: the messages' JSON where the body read knew it (``app.bodies``)."""
    if not isinstance(body, dict):
        raise invalid("request body must be a JSON object")
    messages = count(body, settings, elements)
    found: Recall | None = None
    known: list[Any] = []  # message i's model as an earlier request validated it, or None
    if prefix is not None and prefix.enabled:
        message_units = each(elements, messages, "unit", message_unit)
        units = chain((unit(body.get("system"), b"s"),), message_units)
        found = prefix.recall(scope_of(tenant, "messages"), units, limit=len(messages),  # the last one is decoded
                              tools=body.get("tools"))
        if found is not None and found.entry is not None:
            known = found.known(1, len(messages), itemgetter(0))  # (unit 0 is the system prompt)
    tools = found.tools if found is not None else None  # the tools' models as validated before
    try:
        if tools is not None or any(k is not None for k in known):
            request = validated_but_known(model.model_validate, body, known or [None] * len(messages), tools)
        else:
            request = model.model_validate(body)
    except ValidationError as exc:
        if known or tools is not None:
            try:
                model.model_validate(body)  # the whole request's first problem, with its index
            except ValidationError as whole:
                raise invalid(first_problem(whole)) from None
        raise invalid(first_problem(exc)) from None
    if found is not None and tools is None:
        found.tools = request.tools  # kept with the conversation once planned
    request._recall = found
    return request


__all__ = ["count", "parse"]
