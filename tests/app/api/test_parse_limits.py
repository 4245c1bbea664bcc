"""A face types its request before the prefix service sees it: an oversized request is refused on
its raw counts, and the service is never asked (no digest of thousands of units for a 400)."""

from __future__ import annotations

from typing import Any

import pytest

from app.api.chat.parse import parse_request
from app.api.messages.parse import parse
from app.api.messages.protocol import MessagesRequest
from app.errors import APIError
from app.prefix import PrefixService
from app.settings import Settings

SETTINGS = Settings(backend="http://127.0.0.1:9", max_messages=8)


def conversation(n: int) -> list[dict[str, Any]]:
    return [{"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i}"} for i in range(n)]


def test_an_oversized_chat_request_is_refused_before_the_lookup() -> None:
    prefix = PrefixService(1 << 20)
    with pytest.raises(APIError, match="too many messages"):
        parse_request({"model": "m", "messages": conversation(9)}, SETTINGS, "t", prefix)
    assert prefix.recalls == 0
    parse_request({"model": "m", "messages": conversation(8)}, SETTINGS, "t", prefix)
    assert prefix.recalls == 1  # (a request within the limits is looked up)


def test_an_oversized_messages_request_is_refused_before_the_lookup() -> None:
    prefix = PrefixService(1 << 20)
    with pytest.raises(APIError, match="too many messages"):
        parse(MessagesRequest, {"model": "m", "max_tokens": 8, "messages": conversation(9)}, SETTINGS, "t", prefix)
    assert prefix.recalls == 0
    request = parse(MessagesRequest, {"model": "m", "max_tokens": 8, "messages": conversation(8)}, SETTINGS, "t",
                    prefix)
    assert prefix.recalls == 1 and request._recall is None  # (a first sighting: nothing to take or keep)
