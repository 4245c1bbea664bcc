"""A ``POST /v1/responses`` request's JSON body → ``protocol.Parsed``: every part of the request read, in
one place, before anything is read from the store.

Its lists are counted against the limits before any model decodes them; then the top-level fields
are typed (``protocol.ResponsesRequest``) and checked together (``background`` needs ``store``;
``input``, ``previous_response_id`` or ``conversation`` is required, and the last two exclude each
other); the tools are turned into the functions the model is offered (``protocol.offered_tools``),
``tool_choice`` and ``text.format`` read against them, and the input made items
(``decode.normalised_input``). Each problem is a 400 in OpenAI's error shape that names the field —
a malformed request is answered as such without a store read, whatever state the store is in.
"""

from __future__ import annotations

from typing import Any

from app.api.limits import raw_items, raw_list, too_many
from app.api.protocol import validated
from app.api.responses.decode import normalised_input
from app.api.responses.protocol import Parsed, ResponsesRequest, offered_tools, response_format, tool_choice
from app.bodies import Elements
from app.errors import bad_request
from app.prefix import PrefixService, scope_of
from app.settings import Settings


def parse_request(body: Any, settings: Settings, tenant: str = "", prefix: PrefixService | None = None,
                  elements: Elements | None = None) -> Parsed:
    """The request read (see the module docstring); ``settings``: the limits and ``--hosted-tools``;
    ``prefix``: the service that keeps ``tenant``'s tools as offered for a conversation's next turn;
    ``elements``: the input's JSON where the body read knew it (``app.bodies``)."""
    if not isinstance(body, dict):
        raise bad_request("request body must be a JSON object")
    too_many(len(raw_list(body, "input")), settings.max_input_items, "input items", "--max-input-items", "input")
    tools = raw_list(body, "tools")
    too_many(len(tools) + raw_items(tools, "tools"), settings.max_tools, "tools (namespaced ones included)",
             "--max-tools", "tools")
    request = validated(ResponsesRequest, body)
    if request.background and request.store is False:
        raise bad_request("background responses must be stored: send store: true (the default) with background",
                          "background")
    if request.input is None and request.previous_response_id is None and request.conversation is None:
        raise bad_request("input is required", "input")
    if prefix is not None and prefix.enabled and tools:
        # tools sent before (an agent's next turn, a batch with the same tools): as an earlier request
        # of the tenant's with the very same definitions was offered them (``app.prefix``)
        scope = scope_of(tenant, "responses", settings.hosted_tools)
        key = prefix.tools_key(scope, tools)  # ``None`` at their first sighting: decoded as without the service
        offered = prefix.recall_tools(scope, key)
        if offered is None:
            offered = offered_tools(request.tools, settings.hosted_tools)
            prefix.keep_tools(scope, key, offered)
    else:
        offered = offered_tools(request.tools, settings.hosted_tools)
    conversation = conversation_id(request.conversation)
    if conversation is not None and request.previous_response_id is not None:
        raise bad_request("Mutually exclusive parameters: Ensure you are only providing one of: "
                          "'previous_response_id' or 'conversation'.", "conversation", code="mutually_exclusive_parameters")
    items = normalised_input(request.input, elements, ids=request.store is not False or conversation is not None)
    mode, named, offered = tool_choice(request.tool_choice, offered)
    return Parsed(request, offered, mode, named, response_format(request.text), conversation, items, elements)


def conversation_id(raw: str | dict[str, Any] | None) -> str | None:
    """The ``conversation`` parameter's id (a string, or ``{"id": …}``)."""
    if raw is None:
        return None
    value = raw.get("id") if isinstance(raw, dict) else raw
    if not isinstance(value, str) or not value:
        raise bad_request("conversation: expected a conversation id, or an object with its id", "conversation")
    return value


__all__ = ["conversation_id", "parse_request"]
