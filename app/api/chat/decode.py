"""Chat Completions requests → the shared ``Ask``: messages as the shared conversation
(``app.conversation``), tools, tool choice, response format, sampling, logprobs and ``n``."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from app.api.chat.protocol import ChatCompletionRequest, ChatMessage, NamedToolChoice, ToolDefinition, is_legacy
from app.api.protocol import raw_items, raw_list, too_many, validation_message
from app.backends.generation import Sampling
from app.conversation import Call, Turn
from app.errors import bad_request
from app.media import Part, file_data, joined_text, media_url, no_file_ids, param
from app.pipeline.ask import Ask, Tool
from app.prefix import PrefixService, Recall, scope_of, unit
from app.settings import Settings

#: most alternatives per token OpenAI's ``top_logprobs`` allows
MAX_TOP_LOGPROBS = 20


def parse_request(body: Any, settings: Settings, tenant: str = "",
                  prefix: PrefixService | None = None) -> ChatCompletionRequest:
    """The request (its JSON body as parsed), typed; its lists are counted against the limits before
    they are decoded, and messages an earlier request of ``tenant``'s conversation shared with this
    one (``prefix``, ``app.prefix``: the longest common prefix, byte for byte) are not decoded again."""
    if not isinstance(body, dict):
        raise bad_request("request body must be a JSON object")
    messages = raw_list(body, "messages")
    too_many(len(messages), settings.max_messages, "messages", "--max-messages", "messages")
    too_many(len(raw_list(body, "tools")) + len(raw_list(body, "functions")), settings.max_tools, "tools",
             "--max-tools", "tools")
    too_many(raw_items(messages, "content", "tool_calls"), settings.max_input_items,
             "content parts and tool calls in messages", "--max-input-items", "messages")
    recall = None
    # the deprecated ``functions`` shape is decoded across messages: never from, nor into, the service
    if prefix is not None and prefix.enabled and len(messages) >= prefix.min_units and not is_legacy(body, messages):
        recall = prefix.recall(scope_of(tenant, "chat"), [unit(message) for message in messages],
                               limit=len(messages) - 1)  # one message at least is validated
    known: list[Any] | None = None
    if recall is not None and recall.entry is not None:  # each message's model as validated before, or None
        payload = recall.entry.payload
        known = [payload[i] if end is not None else None for i, end in enumerate(recall.takeable())]
        known += [None] * (len(messages) - len(known))
    try:
        if known is not None:  # only the messages not decoded before are validated
            request = ChatCompletionRequest.model_validate(
                {**body, "messages": [m for m, k in zip(messages, known, strict=True) if k is None]})
            models = iter(request.messages)
            request.messages = [k if k is not None else next(models) for k in known]
        else:
            request = ChatCompletionRequest.model_validate(body)
    except ValidationError as exc:
        if known is not None:  # the same first error as the whole request gives (with its index)
            return parse_request_whole(body)
        message, param = validation_message(exc)
        raise bad_request(message, param) from None
    request._recall = recall
    return request


def parse_request_whole(body: dict[str, Any]) -> ChatCompletionRequest:
    """The whole request validated, messages and all (no known messages taken)."""
    try:
        return ChatCompletionRequest.model_validate(body)
    except ValidationError as exc:
        message, param = validation_message(exc)
        raise bad_request(message, param) from None


#: template variables the server sets itself (a template kwarg may not replace them)
RESERVED_TEMPLATE_NAMES = frozenset({"messages", "tools", "add_generation_prompt", "self", "bos_token", "eos_token"})
_KNOWN_MESSAGE_FIELDS = frozenset({"reasoning_content", "reasoning", "thinking"})


def chat_turns(request: ChatCompletionRequest) -> list[Turn]:
    """The request's messages as the shared conversation (``app.conversation``); the turns of
    messages decoded for an earlier request (``app.prefix``) are taken from it. A message's
    decoding depends on that message and its index only (call ids default to ``call_{index}_{k}``)."""
    recall: Recall | None = request._recall
    turns: list[Turn] = []
    messages = request.messages
    i = 0
    while i < len(messages):
        taken = recall.take(i) if recall is not None else None
        if taken is not None:
            i = taken[0]
            turns.extend(taken[1])
            continue
        message = messages[i]
        parts = media_parts(message, i)
        try:
            text = joined_text(parts) if parts else message.text_content() or ""
        except ValueError as exc:
            raise bad_request(f"messages[{i}].content: {exc}", f"messages.{i}.content") from None
        extra = {k: v for k, v in (message.model_extra or {}).items() if k not in _KNOWN_MESSAGE_FIELDS}
        role = "system" if message.role == "developer" else message.role
        if role == "assistant":
            calls = tuple(Call(call.id or f"call_{i}_{k}", call.function.name, call.function.arguments)
                          for k, call in enumerate(message.tool_calls or ()))
            reasoning = message.reasoning_content if message.reasoning_content is not None else message.reasoning
            thinking = (message.model_extra or {}).get("thinking")
            if reasoning is None and isinstance(thinking, str):
                reasoning = thinking
            turns.append(Turn("assistant", text, calls, reasoning, name=message.name, extra=extra))
        else:
            turns.append(Turn(role, text, tool_call_id=message.tool_call_id, name=message.name, extra=extra,
                              parts=parts))
        if recall is not None:
            recall.after(len(turns), payload=message)
        i += 1
    return turns


_TEXT_PARTS = frozenset({"text", "input_text", "output_text", "refusal"})
DETAILS = frozenset({"auto", "low", "high"})


def media_parts(message: ChatMessage, i: int) -> tuple[Part, ...]:
    """A message's content parts in order when it holds images or files (``image_url`` with a data
    URL — or an ``http(s)`` URL where the server fetches them — and ``detail`` ``auto`` / ``low`` /
    ``high``, passed on; ``file`` with ``file_data``: a PDF, or a text file read as text); empty for
    text only. Images and files go in user and tool messages; any other part type is a 400 (as
    ``text_content`` says)."""
    content = message.content
    if not isinstance(content, list) or all(part.type in _TEXT_PARTS for part in content):
        return ()
    parts: list[Part] = []
    for j, part in enumerate(content):
        where = f"messages[{i}].content[{j}]"
        extra = part.model_extra or {}
        if part.type in _TEXT_PARTS:
            text = part.refusal if part.type == "refusal" else part.text
            if text is None:
                raise bad_request(f"{where}: a {part.type} part needs its text", param(where))
            parts.append(text)
            continue
        if part.type not in ("image_url", "file"):
            raise bad_request(f"{where}: content part type {part.type!r} is not supported (text, image_url and file "
                              "parts are)", param(where))
        if message.role not in ("user", "tool"):
            raise bad_request(f"{where}: {part.type} parts go in user (and tool) messages, not in {message.role} "
                              "messages", param(where))
        if part.type == "image_url":
            image = extra.get("image_url")
            url = image.get("url") if isinstance(image, dict) else image
            detail = image.get("detail") if isinstance(image, dict) else None
            if detail is not None and detail not in DETAILS:
                raise bad_request(f"{where}.image_url.detail: expected auto, low or high", param(where) + ".image_url.detail")
            parts.append(media_url(url, f"{where}.image_url.url", "image", detail))
            continue
        file = extra.get("file")
        if not isinstance(file, dict):
            raise bad_request(f"{where}.file: expected an object with file_data", param(where) + ".file")
        if file.get("file_data") is None:
            raise no_file_ids(f"{where}.file.file_id")
        parts.append(file_data(file["file_data"], f"{where}.file.file_data"))
    return tuple(parts)


def _present(extra: dict[str, Any] | None) -> dict[str, Any]:
    return {k: v for k, v in extra.items() if v is not None} if extra else {}


def shown_tool(tool: ToolDefinition) -> dict[str, Any]:
    """The tool as the chat template is given it: ``tool.model_dump(exclude_none=True)`` — the
    declared fields in their order, then the fields the client added, ``None`` left out at both
    levels — without copying the schema (read-only from here on)."""
    fn = tool.function
    function: dict[str, Any] = {"name": fn.name}
    if fn.description is not None:
        function["description"] = fn.description
    if fn.parameters is not None:
        function["parameters"] = fn.parameters
    if fn.strict is not None:
        function["strict"] = fn.strict
    function.update(_present(fn.model_extra))
    return {"type": tool.type, "function": function, **_present(tool.model_extra)}


def continuing(request: ChatCompletionRequest) -> bool:
    """``continue_final_message`` (vLLM's): the answer continues the final assistant message, which
    must be there and hold text, not calls."""
    if not request.continue_final_message:
        return False
    last = request.messages[-1]
    if last.role != "assistant" or last.tool_calls:
        raise bad_request("continue_final_message needs a final assistant message with text (no tool_calls) to "
                          "continue", "continue_final_message")
    return True


def chat_ask(request: ChatCompletionRequest) -> Ask:
    """The request as the shared ``Ask``."""
    choice = request.tool_choice
    named = choice.function.name if isinstance(choice, NamedToolChoice) else None
    kwargs: dict[str, Any] = dict(request.chat_template_kwargs or {})
    for name in RESERVED_TEMPLATE_NAMES & kwargs.keys():
        raise bad_request(f"chat_template_kwargs.{name}: {name!r} is set by the server from the request itself; "
                          "send it as the request's own field", f"chat_template_kwargs.{name}")
    thinking: bool | None = None
    if request.reasoning_effort == "none":  # as on the Responses API: the template's thinking switch off
        thinking = False
    elif request.reasoning_effort is not None:
        kwargs.setdefault("reasoning_effort", request.reasoning_effort)
    r = request
    if r.top_logprobs is not None and not r.logprobs:
        raise bad_request("top_logprobs needs logprobs: true", "top_logprobs")
    if r.top_logprobs is not None and not 0 <= r.top_logprobs <= MAX_TOP_LOGPROBS:
        raise bad_request(f"top_logprobs must be between 0 and {MAX_TOP_LOGPROBS}", "top_logprobs")
    sampling = Sampling(
        max_tokens=r.token_limit, temperature=r.temperature, top_p=r.top_p, top_k=r.top_k, min_p=r.min_p,
        stop=list(r.stop or []), seed=r.seed, presence_penalty=r.presence_penalty,
        frequency_penalty=r.frequency_penalty, repetition_penalty=r.repetition_penalty,
        logit_bias={int(k): v for k, v in r.logit_bias.items()} if r.logit_bias else None,
    )
    ask = Ask(
        turns=chat_turns(request),
        tools=[Tool.function(t.function.name, t.function.parameters or {}, t.function.description,
                             bool(t.function.strict), shown=shown_tool(t))
               for t in request.tools or ()],
        tool_choice=choice if isinstance(choice, str) else None,
        named_tool=named,
        parallel_tool_calls=request.parallel_tool_calls is not False,
        response_format=request.response_format.model_dump(exclude_none=True) if request.response_format else None,
        sampling=sampling,
        template_kwargs=kwargs,
        thinking=thinking,
        hold_tool_calls=request.hold_tool_calls,
        continue_final=continuing(request),
        top_logprobs=(r.top_logprobs or 0) if r.logprobs else None,
        n=r.n,
    )
    recall: Recall | None = request._recall
    if recall is not None:
        ask.prefix = recall.note(ask.turns)
    return ask
