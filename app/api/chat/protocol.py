"""OpenAI Chat Completions request models (what clients send us).

Unknown top-level fields are accepted and ignored (clients send many); known fields are type
checked, and every violation becomes a 400 OpenAI error that names the field.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

from pydantic import Field, PrivateAttr, field_validator, model_validator

from app.api.protocol import Lenient, ValidatedTool


class FunctionDefinition(Lenient):
    name: str = Field(min_length=1, max_length=256)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class ToolDefinition(ValidatedTool):
    type: Literal["function"] = "function"
    function: FunctionDefinition


class ToolCallFunction(Lenient):
    name: str
    arguments: str | dict[str, Any] = "{}"


class MessageToolCall(Lenient):
    id: str | None = None
    type: Literal["function"] = "function"
    function: ToolCallFunction


class ContentPart(Lenient):
    type: str
    text: str | None = None
    refusal: str | None = None


class ChatMessage(Lenient):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[MessageToolCall] | None = None
    tool_call_id: str | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None

    @model_validator(mode="after")
    def _check_role_fields(self) -> ChatMessage:
        if self.role == "tool" and self.content is None:
            raise ValueError("a tool message needs content")
        if self.role in ("user", "system", "developer") and self.content is None:
            raise ValueError(f"a {self.role} message needs content")
        if self.tool_calls and self.role != "assistant":
            raise ValueError("only assistant messages carry tool_calls")
        return self


class NamedToolChoiceFunction(Lenient):
    name: str


class NamedToolChoice(Lenient):
    type: Literal["function"] = "function"
    function: NamedToolChoiceFunction


class StreamOptions(Lenient):
    include_usage: bool = False


class ResponseFormat(Lenient):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: dict[str, Any] | None = None


def _legacy_functions(body: dict[str, Any]) -> dict[str, Any]:
    """OpenAI's deprecated function calling as tools: ``functions`` → ``tools``, ``function_call``
    → ``tool_choice``, an assistant's ``function_call`` → one tool call, a ``function`` message →
    a tool message answering the latest call of that name (ids are made up, stable per position)."""
    body = dict(body)
    functions = body.pop("functions", None)
    if isinstance(functions, list) and "tools" not in body:
        body["tools"] = [{"type": "function", "function": f} for f in functions]
    function_call = body.pop("function_call", None)
    if function_call is not None and "tool_choice" not in body:
        if isinstance(function_call, dict) and "name" in function_call:
            body["tool_choice"] = {"type": "function", "function": {"name": function_call["name"]}}
        else:
            body["tool_choice"] = function_call
    messages = body.get("messages")
    if not isinstance(messages, list):
        return body
    last_id: dict[str, str] = {}
    converted = []
    for i, message in enumerate(messages):
        if isinstance(message, dict) and message.get("role") == "assistant" and isinstance(
                message.get("function_call"), dict) and not message.get("tool_calls"):
            call = message["function_call"]
            call_id = f"call_fn{i}"
            last_id[str(call.get("name"))] = call_id
            message = {k: v for k, v in message.items() if k != "function_call"}
            message["tool_calls"] = [{"id": call_id, "type": "function", "function": call}]
        elif isinstance(message, dict) and message.get("role") == "function":
            message = {**message, "role": "tool", "tool_call_id": last_id.get(str(message.get("name")), f"call_fn{i}")}
        converted.append(message)
    body["messages"] = converted
    return body


def is_legacy(body: dict[str, Any], messages: Iterable[Any], flags: Iterable[bool] | None = None) -> bool:
    """The request uses OpenAI's deprecated function calling (``functions``, ``function_call``, an
    assistant's ``function_call`` or a ``function`` message among ``messages``: ``legacy_message``,
    or its value for each of them, ``flags``, where known)."""
    return "functions" in body or "function_call" in body or any(
        flags if flags is not None else map(legacy_message, messages))


def legacy_message(message: Any, _: bytes | None = None) -> bool:
    """A message of the deprecated function calling: a ``function`` message, or one with a
    ``function_call`` (its JSON, where known, is not needed: ``app.bodies.each``)."""
    return isinstance(message, dict) and (message.get("role") == "function" or "function_call" in message)


class ChatCompletionRequest(Lenient):
    model: str | None = None
    messages: list[ChatMessage] = Field(min_length=1)
    tools: list[ToolDefinition] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, ge=0, le=1)
    top_k: int | None = None
    min_p: float | None = Field(default=None, ge=0, le=1)
    stop: str | list[str] | None = None
    seed: int | None = None
    logit_bias: dict[str, float] | None = None
    # accepted, and of no effect here: user, metadata, service_tier, store, prediction (see README)
    presence_penalty: float | None = Field(default=None, ge=-2, le=2)
    frequency_penalty: float | None = Field(default=None, ge=-2, le=2)
    repetition_penalty: float | None = None
    n: int = Field(default=1, ge=1)
    logprobs: bool | None = None
    top_logprobs: int | None = None
    response_format: ResponseFormat | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    reasoning_effort: str | None = None
    # toolwire extension: deliver each tool call whole, once complete (never a partial call)
    hold_tool_calls: bool | None = None
    #: vLLM's extension: the answer continues the final assistant message instead of a new turn
    continue_final_message: bool = False
    #: what the prefix service (``app.prefix``) found of the messages when they were decoded, and
    #: the indices of the messages it had validated and decoded before (``app.api.chat.parse``)
    _recall: Any = PrivateAttr(default=None)
    _known: frozenset[int] = PrivateAttr(default=frozenset())

    @field_validator("tool_choice", mode="before")
    @classmethod
    def _tool_choice_shape(cls, value: Any) -> Any:
        if value is None or value in ("none", "auto", "required"):
            return value
        kind = value.get("type") if isinstance(value, dict) else None
        if kind == "function" or (isinstance(value, dict) and kind is None and "function" in value):
            return value
        said = repr(kind) if kind is not None else repr(value)[:40]
        raise ValueError(f"{said} is not supported here: send 'none', 'auto', 'required' or "
                         "{'type': 'function', 'function': {'name': ...}} (allowed_tools and custom tools are "
                         "not supported on /v1/chat/completions)")

    @field_validator("tools", mode="before")
    @classmethod
    def _function_tools_only(cls, value: Any) -> Any:
        for i, tool in enumerate(value if isinstance(value, list) else ()):
            kind = tool.get("type", "function") if isinstance(tool, dict) else None
            if kind != "function":
                raise ValueError(f"tools[{i}].type is {kind!r}: /v1/chat/completions takes 'function' tools only "
                                 "(custom tools are accepted on /v1/responses; hosted tools such as web search "
                                 "run nowhere behind this server)")
        return value

    @model_validator(mode="before")
    @classmethod
    def _unsupported_outputs(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        if "audio" in (data.get("modalities") or ()) or data.get("audio") is not None:
            raise ValueError("audio output (modalities / audio) is not supported: this server returns text")
        if data.get("web_search_options") is not None:
            raise ValueError("web_search_options is not supported: no hosted web search runs behind this server; "
                             "offer a function tool instead")
        return data

    @field_validator("logit_bias")
    @classmethod
    def _token_biases(cls, value: dict[str, float] | None) -> dict[str, float] | None:
        for key, bias in (value or {}).items():
            if not key.isdigit():
                raise ValueError(f"keys are token ids (decimal strings); got {key!r}")
            if not -100 <= bias <= 100:
                raise ValueError(f"biases lie in [-100, 100]; token {key} has {bias}")
        return value

    @model_validator(mode="before")
    @classmethod
    def _legacy(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        messages = data.get("messages")
        if is_legacy(data, messages if isinstance(messages, list) else []):
            return _legacy_functions(data)
        return data

    @field_validator("stop")
    @classmethod
    def _stop_list(cls, value: str | list[str] | None) -> list[str] | None:
        if value is None:
            return None
        stops = [value] if isinstance(value, str) else value
        if len(stops) > 16:
            raise ValueError("at most 16 stop sequences")
        return [s for s in stops if s]

    @property
    def token_limit(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens
