"""Chat Completions requests (typed: ``app.api.chat.parse``) → the shared ``Ask``: messages as the
shared conversation (``app.conversation``), tools, tool choice, response format, sampling, logprobs
and ``n``. The messages the prefix service had decoded for an earlier request are not decoded again:
the decoder decodes the others, then the service's ``Recall`` assembles the turns and the request's
note in one account (``app.prefix``)."""

from __future__ import annotations

from typing import Any

from app.api.chat.protocol import ChatCompletionRequest, ChatMessage, ContentPart, NamedToolChoice, ToolDefinition
from app.backends.generation import Sampling
from app.conversation import Call, Turn
from app.errors import bad_request
from app.media import Part, file_data, joined_text, media_url, no_file_ids, param
from app.pipeline.ask import Ask, Tool
from app.prefix import Recall

#: most alternatives per token OpenAI's ``top_logprobs`` allows
MAX_TOP_LOGPROBS = 20


#: template variables the server sets itself (a template kwarg may not replace them)
RESERVED_TEMPLATE_NAMES = frozenset({"messages", "tools", "add_generation_prompt", "self", "bos_token", "eos_token"})
_KNOWN_MESSAGE_FIELDS = frozenset({"reasoning_content", "reasoning", "thinking"})


def message_turn(message: ChatMessage, i: int) -> Turn:
    """Message ``i`` as a turn of the shared conversation (``app.conversation``). It depends on the
    message and its index only (call ids default to ``call_{index}_{k}``): what lets the prefix
    service hand an earlier request's turns to this one."""
    text, parts = _content(message, i)
    extra = {k: v for k, v in (message.model_extra or {}).items() if k not in _KNOWN_MESSAGE_FIELDS}
    role = "system" if message.role == "developer" else message.role
    if role == "assistant":
        calls = tuple(Call(call.id or f"call_{i}_{k}", call.function.name, call.function.arguments)
                      for k, call in enumerate(message.tool_calls or ()))
        reasoning = message.reasoning_content if message.reasoning_content is not None else message.reasoning
        thinking = (message.model_extra or {}).get("thinking")
        if reasoning is None and isinstance(thinking, str):
            reasoning = thinking
        return Turn("assistant", text, calls, reasoning, name=message.name, extra=extra)
    return Turn(role, text, tool_call_id=message.tool_call_id, name=message.name, extra=extra, parts=parts)


_TEXT_PARTS = frozenset({"text", "input_text", "output_text", "refusal"})
DETAILS = frozenset({"auto", "low", "high"})


def _content(message: ChatMessage, i: int) -> tuple[str, tuple[Part, ...]]:
    """Message ``i``'s text, and its content parts in order when it holds images or files
    (``media_parts``; empty for text only): text parts are joined (a refusal part counts as its
    text); a text or refusal part without its text is a 400."""
    content = message.content
    if not isinstance(content, list):
        return content or "", ()
    if any(part.type not in _TEXT_PARTS for part in content):
        parts = media_parts(message, content, i)
        return joined_text(parts), parts
    texts = []
    for part in content:
        text = part.refusal if part.type == "refusal" else part.text
        if text is None:
            raise bad_request(f"messages[{i}].content: content part type {part.type!r} is not supported (text and "
                              "refusal parts; image_url and file parts in user messages)", f"messages.{i}.content")
        texts.append(text)
    return "".join(texts), ()


def media_parts(message: ChatMessage, content: list[ContentPart], i: int) -> tuple[Part, ...]:
    """Message ``i``'s ``content`` parts in order, when they hold images or files (``image_url`` with
    a data URL — or an ``http(s)`` URL where the server fetches them — and ``detail`` ``auto`` /
    ``low`` / ``high``, passed on; ``file`` with ``file_data``: a PDF, or a text file read as text).
    Images and files go in user and tool messages; any other part type is a 400."""
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


def _offered(tool: ToolDefinition) -> Tool:
    fn = tool.function
    return Tool.function(fn.name, fn.parameters or {}, fn.description, bool(fn.strict), shown=shown_tool(tool))


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
    recall: Recall | None = request._recall
    known = request._known  # decoded for an earlier request: the service's to hand over
    decoded: list[tuple[list[Turn], ChatMessage] | None] = []
    for i, message in enumerate(request.messages):
        decoded.append(None if i in known else ([message_turn(message, i)], message))
    last = request.messages[-1]  # vLLM's ``continue_final_message``: continue it, text and no calls
    if request.continue_final_message and (last.role != "assistant" or last.tool_calls):
        raise bad_request("continue_final_message needs a final assistant message with text (no tool_calls) to "
                          "continue", "continue_final_message")
    if recall is not None:
        turns, note = recall.assemble(decoded)
    else:
        turns, note = [turn for pair in decoded if pair is not None for turn in pair[0]], None
    return Ask(
        turns=turns,
        tools=[t.offered(_offered) for t in request.tools or ()],
        tool_choice=choice if isinstance(choice, str) else None,
        named_tool=named,
        parallel_tool_calls=request.parallel_tool_calls is not False,
        response_format=request.response_format.model_dump(exclude_none=True) if request.response_format else None,
        sampling=sampling,
        template_kwargs=kwargs,
        thinking=thinking,
        hold_tool_calls=request.hold_tool_calls,
        continue_final=request.continue_final_message,
        top_logprobs=(r.top_logprobs or 0) if r.logprobs else None,
        n=r.n,
        prefix=note,
    )
