"""The request checks (``app.pipeline.validate``): a response format's schema is read one way for
the checks and for their keys."""

from __future__ import annotations

from typing import Any

import pytest

from app.conversation import Turn
from app.errors import APIError
from app.pipeline.ask import Ask
from app.pipeline.validate import check_ask, schema_texts
from app.settings import Settings

SETTINGS = Settings(backend="http://127.0.0.1:9")


def ask_with(response_format: dict[str, Any] | None) -> Ask:
    return Ask(turns=[Turn("user", "hi")], response_format=response_format)


def test_a_response_format_schema_that_is_not_an_object_is_a_400_naming_it() -> None:
    ask = ask_with({"type": "json_schema", "json_schema": {"name": "r", "schema": ["not", "a", "schema"]}})
    assert schema_texts(ask) == []  # nothing to key
    with pytest.raises(APIError) as refused:
        check_ask(ask, SETTINGS)
    assert refused.value.status == 400 and refused.value.param == ask.format_param
    assert "a JSON schema object is required" in str(refused.value)


def test_a_response_format_schema_is_checked_and_keyed_once() -> None:
    bad = ask_with({"type": "json_schema", "json_schema": {"name": "r", "schema": {"type": "no-such-type"}}})
    assert len(schema_texts(bad)) == 1
    with pytest.raises(APIError, match="is not a valid JSON schema"):
        check_ask(bad, SETTINGS)
    for fmt in (None, {"type": "json_object"}, {"type": "json_schema", "json_schema": {"name": "r"}}):
        check_ask(ask_with(fmt), SETTINGS)  # nothing to check
    check_ask(ask_with({"type": "json_schema", "json_schema": {"name": "r", "schema": {"type": "object"}}}), SETTINGS)
