"""Anthropic Messages API request models (what clients send us) and Anthropic's error shape.

Unknown fields are accepted and ignored (Claude Code sends many: ``cache_control``,
``context_management``, ``metadata``, ``defer_loading``, beta fields); known fields are type
checked. Content blocks are checked one by one (``block``), so a problem is reported at its place —
``messages[2].content[0].tool_use_id: Field required`` — as a 400 ``invalid_request_error``.
Errors are ``{"type": "error", "error": {"type", "message"}}`` with Anthropic's status codes.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, PrivateAttr, ValidationError, model_validator
from starlette.responses import JSONResponse

from app.api.protocol import Lenient, ValidatedTool
from app.errors import APIError

# ------------------------------------------------------------------------------------- errors

#: toolwire's HTTP status → Anthropic's (status, error type)
ERROR_TYPES: dict[int, tuple[int, str]] = {
    400: (400, "invalid_request_error"),
    401: (401, "authentication_error"),
    403: (403, "permission_error"),
    404: (404, "not_found_error"),
    413: (413, "request_too_large"),
    429: (429, "rate_limit_error"),
    503: (529, "overloaded_error"),  # backend busy or unreachable: Anthropic's 529, which clients retry
    504: (504, "timeout_error"),
}


def error_body(kind: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}}


def anthropic_error(exc: APIError) -> tuple[int, dict[str, Any]]:
    """``exc`` as Anthropic's (status, body); statuses without a match are ``api_error``."""
    status, kind = ERROR_TYPES.get(exc.status, (exc.status, "api_error" if exc.status >= 500 else
                                                "invalid_request_error"))
    return status, error_body(kind, exc.message)


def error_response(exc: APIError) -> JSONResponse:
    status, body = anthropic_error(exc)
    return JSONResponse(body, status_code=status, headers=exc.headers or None)


def invalid(message: str) -> APIError:
    return APIError(400, message)


def first_problem(exc: ValidationError, where: str = "") -> str:
    """The first validation problem, located: ``messages[0].content: Field required``."""
    error = exc.errors()[0]
    path = where
    for part in error.get("loc", ()):
        if isinstance(part, int):
            path += f"[{part}]"
        elif part and not any(c in part for c in "[]-,") and part not in ("str", "list"):  # union branch names
            path += f".{part}" if path else part
    msg = error.get("msg", "invalid value").removeprefix("Value error, ")
    return f"{path}: {msg}" if path else msg


# ------------------------------------------------------------------------------------ blocks


class TextBlock(Lenient):
    type: Literal["text"]
    text: str


class ToolUseBlock(Lenient):
    type: Literal["tool_use"]
    id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    input: dict[str, Any] = Field(default_factory=dict)


class ToolResultBlock(Lenient):
    type: Literal["tool_result"]
    tool_use_id: str = Field(min_length=1)
    content: str | list[dict[str, Any]] | None = None
    is_error: bool | None = None


class ThinkingBlock(Lenient):
    type: Literal["thinking"]
    thinking: str = ""
    signature: str | None = None


class RedactedThinkingBlock(Lenient):
    type: Literal["redacted_thinking"]
    data: str = ""


class ToolReferenceBlock(Lenient):
    """A deferred tool loaded by a tool search (inside a ``tool_result``)."""

    type: Literal["tool_reference"]
    tool_name: str = Field(min_length=1)


class ImageBlock(Lenient):
    """An image: ``source`` ``{"type": "base64", "media_type", "data"}`` or ``{"type": "url", "url"}``."""

    type: Literal["image"]
    source: dict[str, Any]


class DocumentBlock(Lenient):
    """A document: ``source`` a base64 or url PDF, ``{"type": "text", "data"}`` plain text, or
    ``{"type": "content", "content": …}`` text blocks; ``title`` and ``context`` optional."""

    type: Literal["document"]
    source: dict[str, Any]
    title: str | None = None
    context: str | None = None


Block = (TextBlock | ToolUseBlock | ToolResultBlock | ThinkingBlock | RedactedThinkingBlock | ToolReferenceBlock
         | ImageBlock | DocumentBlock)

BLOCKS: dict[str, type[Lenient]] = {
    "text": TextBlock, "tool_use": ToolUseBlock, "tool_result": ToolResultBlock, "thinking": ThinkingBlock,
    "redacted_thinking": RedactedThinkingBlock, "tool_reference": ToolReferenceBlock, "image": ImageBlock,
    "document": DocumentBlock,
}

#: where each block type may appear
ALLOWED: dict[str, frozenset[str]] = {
    "user": frozenset({"text", "tool_result", "image", "document"}),
    "assistant": frozenset({"text", "tool_use", "thinking", "redacted_thinking"}),
    "system": frozenset({"text"}),
    "tool_result": frozenset({"text", "tool_reference", "image", "document"}),
}

_UNSUPPORTED = {
    "search_result": "search_result blocks are not supported",
    "container_upload": "container_upload blocks are not supported",
    "server_tool_use": "server tools are not supported: this server runs no tools of its own",
    "web_search_tool_result": "server tools are not supported: this server runs no tools of its own",
}


def block(raw: Any, where: str, context: str) -> Block:
    """One content block at ``where`` (``messages[1].content[0]``), checked for the ``context`` it
    appears in (a role, or ``tool_result``)."""
    if not isinstance(raw, dict):
        raise invalid(f"{where}: a content block must be an object")
    kind = raw.get("type")
    if not isinstance(kind, str):
        raise invalid(f"{where}.type: Field required")
    if kind in _UNSUPPORTED:
        raise invalid(f"{where}: {_UNSUPPORTED[kind]}")
    model = BLOCKS.get(kind)
    if model is None:
        raise invalid(f"{where}.type: unknown content block type {kind!r}")
    if kind not in ALLOWED[context]:
        place = "a tool_result" if context == "tool_result" else f"a {context} message"
        raise invalid(f"{where}: {kind} blocks cannot appear in {place}")
    try:
        return model.model_validate(raw)  # type: ignore[return-value]
    except ValidationError as exc:
        raise invalid(first_problem(exc, where)) from None


# ---------------------------------------------------------------------------------- request


class InputMessage(Lenient):
    # "system" mid-conversation: Claude Code 2.1 sends one after the first user turn
    role: Literal["user", "assistant", "system"]
    content: str | list[dict[str, Any]]


class Tool(ValidatedTool):
    name: str = Field(min_length=1, max_length=256)
    description: str | None = None
    input_schema: dict[str, Any] = Field(default_factory=dict)
    type: str | None = None
    defer_loading: bool | None = None

    @model_validator(mode="after")
    def _custom_only(self) -> Tool:
        if self.type not in (None, "custom"):
            raise ValueError(f"tool type {self.type!r} is a server tool, which is not supported: this server runs "
                             "no tools of its own (client tools have no type, or type 'custom')")
        return self


class ToolChoice(Lenient):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool | None = None

    @model_validator(mode="after")
    def _named(self) -> ToolChoice:
        if self.type == "tool" and not self.name:
            raise ValueError("tool_choice of type 'tool' needs a name")
        return self


class Thinking(Lenient):
    type: Literal["enabled", "disabled", "adaptive"]
    budget_tokens: int | None = Field(None, ge=0)
    display: str | None = None

    @model_validator(mode="after")
    def _budget(self) -> Thinking:
        if self.type == "enabled" and self.budget_tokens is None:
            raise ValueError("thinking of type 'enabled' needs budget_tokens")
        return self


class OutputFormat(Lenient):
    type: Literal["json_schema"]
    schema_: dict[str, Any] = Field(alias="schema")


class OutputConfig(Lenient):
    """``effort`` (the template's ``reasoning_effort``) and ``format`` (structured output, constrained
    as Chat Completions' ``response_format: json_schema`` is). Any other field is refused: a request
    never has part of its output config silently dropped."""

    effort: str | None = None
    format: OutputFormat | None = None

    @model_validator(mode="after")
    def _known_only(self) -> OutputConfig:
        unknown = sorted((self.model_extra or {}).keys())
        if unknown:
            raise ValueError(f"{', '.join(unknown)} is not supported by this server (supported: effort, format)")
        return self


class Conversation(Lenient):
    """What ``/v1/messages`` and ``/v1/messages/count_tokens`` share: the prompt's ingredients."""

    model: str
    messages: list[InputMessage] = Field(min_length=1)
    system: str | list[dict[str, Any]] | None = None
    tools: list[Tool] | None = None
    tool_choice: ToolChoice | None = None
    thinking: Thinking | None = None
    output_config: OutputConfig | None = None
    #: what the prefix service (``app.prefix``) has of the conversation (``app.api.messages.parse``)
    _recall: Any = PrivateAttr(default=None)


class MessagesRequest(Conversation):
    max_tokens: int = Field(ge=1)
    stop_sequences: list[str] | None = None
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, ge=0, le=1)
    top_k: int | None = Field(None, ge=0)
    metadata: dict[str, Any] | None = None
    stream: bool = False
