"""A Chat Completions request's JSON body → the typed request (``ChatCompletionRequest``).

Its lists are counted against the limits before any model decodes them; then it is validated —
except the messages an earlier request of the tenant's conversation validated already (the prefix
service, ``app.prefix``: the longest common prefix, byte for byte) and its tool definitions when
they are the same bytes as an earlier request's, which are taken as they were.
What the service found rides on the request for the decoder (``app.api.chat.decode``).
"""

from __future__ import annotations

from itertools import compress, repeat
from operator import is_not
from typing import Any

from pydantic import ValidationError

from app.api.chat.protocol import ChatCompletionRequest, is_legacy, legacy_message
from app.api.limits import raw_items, raw_list, too_many
from app.api.protocol import validated, validated_but_known
from app.bodies import Elements, each, total
from app.errors import bad_request
from app.prefix import PrefixService, scope_of, unit
from app.settings import Settings


def _unit(message: Any, data: bytes | None) -> bytes | None:
    """A message's unit (``app.prefix``; ``data``: its JSON, where known)."""
    return unit(message, data=data)


def _parts_and_calls(message: Any) -> int:
    """A message's content parts and tool calls."""
    return raw_items([message], "content", "tool_calls")


def parse_request(body: Any, settings: Settings, tenant: str = "", prefix: PrefixService | None = None,
                  elements: Elements | None = None) -> ChatCompletionRequest:
    """The request typed (see the module docstring); ``prefix``: the service to ask, once, which of
    ``tenant``'s messages it has validated before; ``elements``: the messages' JSON where the body
    read knew it (``app.bodies``)."""
    if not isinstance(body, dict):
        raise bad_request("request body must be a JSON object")
    messages = raw_list(body, "messages")
    too_many(len(messages), settings.max_messages, "messages", "--max-messages", "messages")
    too_many(len(raw_list(body, "tools")) + len(raw_list(body, "functions")), settings.max_tools, "tools",
             "--max-tools", "tools")
    too_many(total(elements, messages, "parts and calls", _parts_and_calls), settings.max_input_items,
             "content parts and tool calls in messages", "--max-input-items", "messages")
    units = each(elements, messages, "unit", _unit)  # (drawn as the service asks: nothing without it)
    legacy = each(elements, messages, "legacy", legacy_message)
    recall = known = None
    # the deprecated ``functions`` shape is decoded across messages: never from, nor into, the service
    if prefix is not None and prefix.enabled and not is_legacy(body, messages, legacy):
        recall = prefix.recall(scope_of(tenant, "chat"), units,
                               limit=len(messages) - 1, tools=body.get("tools"))  # one message at least is validated
    if recall is not None and recall.entry is not None:  # each message's model as validated before, or None
        known = recall.known(0, len(messages))
    tools = recall.tools if recall is not None else None  # the tools' models as validated before
    request = None
    if known is not None or tools is not None:
        try:  # only what was not validated before is validated
            request = validated_but_known(ChatCompletionRequest.model_validate, body,
                                          known if known is not None else [None] * len(messages), tools)
        except ValidationError:  # the same first error as the whole request gives (with its index), below
            recall = None
        else:
            known = known or []
            request._known = frozenset(compress(range(len(known)), map(is_not, known, repeat(None))))
    if request is None:
        request = validated(ChatCompletionRequest, body)
    if recall is not None and tools is None:
        recall.tools = request.tools  # kept with the conversation once planned
    request._recall = recall
    return request


__all__ = ["parse_request"]
