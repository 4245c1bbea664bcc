"""What every face's request models share: lenient pydantic models (fields a face does not know are
kept, not refused), and validation — the first problem as a located message, and a request
validated but for the messages validated before (``app.prefix``). A request's lists are counted
before any of this (``app.api.limits``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import compress, repeat
from operator import is_
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict, PrivateAttr, ValidationError

from app.errors import bad_request

if TYPE_CHECKING:
    from app.pipeline.ask import Tool


class Lenient(BaseModel):
    """A request model that keeps fields it does not declare (clients send many a server ignores)."""

    model_config = ConfigDict(extra="allow")


class ValidatedTool(Lenient):
    """A face's tool definition, validated: it makes the ``Tool`` it offers the model once
    (``offered``) — the prefix service hands an agent's next request the definitions validated for
    its last, and so the same ``Tool``, whose derived parts are worked out once (``Tool.once``)."""

    _offered: Any = PrivateAttr(default=None)

    def offered(self, make: Callable[[Any], Tool]) -> Tool:
        """``make(self)``, the first time; the same ``Tool`` after."""
        tool: Tool | None = self._offered
        if tool is None:
            tool = self._offered = make(self)
        return tool


def validation_message(exc: ValidationError) -> tuple[str, str | None]:
    """The first validation problem as ``(message, param)`` (``param`` in OpenAI's dotted spelling)."""
    error = exc.errors()[0]
    loc = ".".join(str(p) for p in error.get("loc", ()) if not isinstance(p, str) or not p.startswith("function-"))
    msg = error.get("msg", "invalid value").removeprefix("Value error, ")
    return (f"{loc}: {msg}" if loc else msg), (loc or None)


M = TypeVar("M", bound=BaseModel)


def validated(model: type[M], data: Any) -> M:
    """``data`` validated as ``model``; its first problem a 400 that says where (``validation_message``)."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        message, param = validation_message(exc)
        raise bad_request(message, param) from None


class _WithMessages(Protocol):
    messages: Any
    tools: Any


R = TypeVar("R", bound=_WithMessages)


def validated_but_known(validate: Callable[[dict[str, Any]], R], body: dict[str, Any], known: Sequence[Any],
                        tools: list[Any] | None = None) -> R:
    """``body`` validated by ``validate`` (a request model's ``model_validate``) but for what was
    validated before (``app.prefix``): the messages of ``known`` (``known[i]``: message ``i``'s
    model, or ``None``) and, when ``tools`` is given, the tool definitions (their models); the rest
    is validated and the known models put back in their places. Raises ``ValidationError`` as
    ``validate`` does — its index counts only the messages validated, so a face reports the whole
    body's first problem instead."""
    messages = body.get("messages")
    messages = messages if isinstance(messages, list) else []
    if len(messages) != len(known):
        raise ValueError(f"{len(known)} messages known of {len(messages)}")
    unknown = list(compress(range(len(known)), map(is_, known, repeat(None))))  # (in C, as below)
    data = {**body, "messages": list(map(messages.__getitem__, unknown))}
    if tools is not None:
        del data["tools"]
    request = validate(data)
    merged = list(known)
    for i, fresh in zip(unknown, request.messages, strict=True):
        merged[i] = fresh
    request.messages = merged
    if tools is not None:
        request.tools = tools
    return request
