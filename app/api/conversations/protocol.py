"""Conversations API requests (what clients send us), checked: metadata, batches of items, and the
query of an item listing. A problem is a 400 in OpenAI's error shape that names the field.

Limits are OpenAI's: at most 16 metadata pairs (keys up to 64 characters, string values up to
512), at most 20 items per write, pages of 1 to 100 items (20 by default, newest first).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from starlette.datastructures import QueryParams

from app.api import query
from app.errors import bad_request
from app.state.items import MAX_ID, indexable

MAX_BATCH = 20
MAX_METADATA = 16
MAX_KEY, MAX_VALUE = 64, 512


def body_object(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise bad_request("request body must be a JSON object")
    return body


def metadata(raw: Any, where: str = "metadata") -> dict[str, str]:
    """A ``metadata`` object (``None`` is none)."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise bad_request(f"{where}: expected an object of string keys and string values", where)
    if len(raw) > MAX_METADATA:
        raise bad_request(f"{where}: at most {MAX_METADATA} key-value pairs (got {len(raw)})", where)
    for key, value in raw.items():
        if len(key) > MAX_KEY:
            raise bad_request(f"{where}: key {key[:20]!r}… is longer than {MAX_KEY} characters", f"{where}.{key}")
        if not isinstance(value, str):
            raise bad_request(f"{where}.{key}: expected a string", f"{where}.{key}")
        if len(value) > MAX_VALUE:
            raise bad_request(f"{where}.{key}: longer than {MAX_VALUE} characters", f"{where}.{key}")
    return dict(raw)


def batch(raw: Any, where: str = "items") -> list[dict[str, Any]]:
    """A list of at most ``MAX_BATCH`` item objects (``None`` is none)."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise bad_request(f"{where}: expected a list of items", where)
    if len(raw) > MAX_BATCH:
        raise bad_request(f"{where}: at most {MAX_BATCH} items can be added at a time (got {len(raw)})", where)
    for i, item in enumerate(raw):
        if not isinstance(item, dict):
            raise bad_request(f"{where}[{i}]: an item must be an object", f"{where}.{i}")
        if "id" in item and not indexable(item["id"]):
            raise bad_request(f"{where}[{i}].id: expected a string of 1 to {MAX_ID} characters without line breaks",
                              f"{where}.{i}.id")
    return raw


def includes(params: QueryParams) -> set[str]:
    """The ``include`` values of a query (``include=a&include=b``, or ``include[]=…``). Only
    ``reasoning.encrypted_content`` changes anything here; the others name outputs of hosted tools,
    images and logprobs, which toolwire's items never hold."""
    return set(params.getlist("include")) | set(params.getlist("include[]"))


@dataclass(frozen=True)
class PageQuery:
    after: str | None
    limit: int
    descending: bool


def page_query(params: QueryParams) -> PageQuery:
    """An item listing's ``order``, ``limit`` and ``after``, read strictly (``app.api.query``)."""
    order = query.choice(params, "order", "desc", ("asc", "desc"))
    limit = query.number(params, "limit", 20, 1, 100)
    assert limit is not None
    return PageQuery(query.text(params, "after"), limit, order == "desc")
