"""A request's lists counted against the server's limits on its raw JSON, before any model decodes
them: decoding a huge list costs far more than counting it. Every face counts its lists here first
(``app.api.<face>.parse``)."""

from __future__ import annotations

from typing import Any

from app.errors import bad_request


def too_many(count: int, limit: int, what: str, flag: str, param: str | None) -> None:
    """A 400 naming ``flag`` when ``count`` passes ``limit``."""
    if count > limit:
        raise bad_request(f"too many {what} ({count} > {limit}, {flag})", param, code="too_many_items")


def raw_list(body: dict[str, Any], key: str) -> list[Any]:
    """``body[key]`` when it is a list, else an empty list (the request model reports other shapes)."""
    value = body.get(key)
    return value if isinstance(value, list) else []


def raw_items(entries: list[Any], *keys: str) -> int:
    """How many elements the lists at ``keys`` of every object in ``entries`` hold, together."""
    total = 0
    for entry in entries:
        if isinstance(entry, dict):
            for key in keys:
                value = entry.get(key)
                if isinstance(value, list):
                    total += len(value)
    return total


__all__ = ["raw_items", "raw_list", "too_many"]
