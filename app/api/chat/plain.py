"""Short plain Chat Completions requests decoded without the request model.

Most first turns are a few text messages and some sampling numbers. For them the request model
(pydantic: a schema walk, private attributes, a model per message) costs more than everything
else before the backend is asked, on a cold process several times more. ``plain_ask`` decodes
exactly such a request into the same ``Ask`` that ``chat_ask(parse_request(body))`` gives, and
declines (``None``) anything else: the full path then decodes it, errors and all.

*Plain* here is deliberately narrow, so that no value can decode differently on the two paths:
fewer messages than ``app.prefix.MIN_UNITS`` (a list that short is never kept nor served by
the prefix service), each a JSON object of ``role`` (not ``tool``), ``content`` (a
string) and perhaps ``name`` (a string); top-level fields from ``FIELDS`` only, each of its exact
JSON type (no coercion: ``"5"`` or ``true`` where a number goes is the full path's to refuse) and
within its bounds. A field the model does not declare, a tool, a content part — the full path.
"""

from __future__ import annotations

from typing import Any

from app.backends.generation import Sampling
from app.conversation import Role, Turn
from app.pipeline.ask import Ask
from app.prefix import MIN_UNITS
from app.settings import Settings

_INT = (int,)
#: integers a float holds exactly
_EXACT = 2**53
_NUMBER = (int, float)
#: top-level fields a plain request may carry: their JSON types, bounds (inclusive; ``None``: none)
#: and, for numbers, whether the model makes them floats
FIELDS: dict[str, tuple[tuple[type, ...], float | None, float | None, bool]] = {
    "max_tokens": (_INT, 1, None, False),
    "max_completion_tokens": (_INT, 1, None, False),
    "temperature": (_NUMBER, 0, 2, True),
    "top_p": (_NUMBER, 0, 1, True),
    "top_k": (_INT, None, None, False),
    "min_p": (_NUMBER, 0, 1, True),
    "seed": (_INT, None, None, False),
    "presence_penalty": (_NUMBER, -2, 2, True),
    "frequency_penalty": (_NUMBER, -2, 2, True),
    "repetition_penalty": (_NUMBER, None, None, True),
}
#: fields read apart from the numbers (``model``, ``stream``, ``stream_options``, ``n``, ``messages``)
#: and those the model accepts and leaves unread (``user`` …): a string or ``None``
_OTHER = frozenset({"model", "messages", "stream", "stream_options", "n", "user"})
_ROLES: dict[str, Role] = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}
_MESSAGE_KEYS = frozenset({"role", "content", "name"})


class PlainChat:
    """A plain request decoded: its ``Ask``, whether it streams, and whether the stream ends with
    a usage chunk."""

    __slots__ = ("ask", "include_usage", "stream")

    def __init__(self, ask: Ask, stream: bool, include_usage: bool) -> None:
        self.ask, self.stream, self.include_usage = ask, stream, include_usage


def plain_ask(body: Any, settings: Settings) -> PlainChat | None:
    """``body`` (the request's JSON as parsed) decoded as the full path would, when it is plain (see
    the module docstring); else ``None``."""
    if type(body) is not dict:
        return None
    messages = body.get("messages")
    if type(messages) is not list or not 0 < len(messages) < MIN_UNITS or len(messages) > settings.max_messages:
        return None
    numbers = _numbers(body)
    head = _head(body) if numbers is not None else None
    turns = _turns(messages) if head is not None else None
    if numbers is None or head is None or turns is None:
        return None
    stream, n, include_usage = head
    sampling = Sampling(
        max_tokens=numbers.get("max_completion_tokens") or numbers.get("max_tokens"),
        temperature=numbers.get("temperature"), top_p=numbers.get("top_p"), top_k=numbers.get("top_k"),
        min_p=numbers.get("min_p"), seed=numbers.get("seed"), presence_penalty=numbers.get("presence_penalty"),
        frequency_penalty=numbers.get("frequency_penalty"), repetition_penalty=numbers.get("repetition_penalty"))
    return PlainChat(Ask(turns=turns, sampling=sampling, n=n), stream, include_usage)


def _numbers(body: dict[str, Any]) -> dict[str, Any] | None:
    """The ``FIELDS`` the body sets, as the model holds them; ``None`` when one is out of type or
    bounds, or the body has a field neither in ``FIELDS`` nor in ``_OTHER``."""
    numbers: dict[str, Any] = {}
    for key, value in body.items():
        rule = FIELDS.get(key)
        if rule is None:
            if key not in _OTHER:
                return None
            continue
        if value is None:
            continue
        kinds, low, high, floats = rule
        if type(value) not in kinds or (low is not None and value < low) or (high is not None and value > high):
            return None
        if floats:
            if type(value) is int and not -_EXACT < value < _EXACT:
                return None  # (the model's float of a huge integer is the full path's to make or refuse)
            value = float(value)
        numbers[key] = value
    return numbers


def _head(body: dict[str, Any]) -> tuple[bool, int, bool] | None:
    """``(stream, n, include_usage)``, when ``model``, ``user``, ``stream``, ``n`` and
    ``stream_options`` are of their exact types."""
    model, user, stream, n = body.get("model"), body.get("user"), body.get("stream", False), body.get("n", 1)
    if not (model is None or type(model) is str) or not (user is None or type(user) is str):
        return None
    if type(stream) is not bool or type(n) is not int or n < 1:
        return None
    options = body.get("stream_options")
    if options is None:
        return stream, n, False
    if type(options) is not dict or not options.keys() <= {"include_usage"}:
        return None
    include_usage = options.get("include_usage", False)
    return (stream, n, include_usage) if type(include_usage) is bool else None


def _turns(messages: list[Any]) -> list[Turn] | None:
    """The messages as turns, when each is a plain text message."""
    turns = []
    for message in messages:
        if type(message) is not dict or not message.keys() <= _MESSAGE_KEYS:
            return None
        said, content, name = message.get("role"), message.get("content"), message.get("name")
        role = _ROLES.get(said) if type(said) is str else None
        if role is None or type(content) is not str or not (name is None or type(name) is str):
            return None
        turns.append(Turn(role, content, name=name))
    return turns
