"""Checks every face applies to an ``Ask`` before planning: request limits and tool schemas.

Problems are ``APIError`` 400s that name the field (``param`` in Chat Completions' spelling; faces
with other spellings pass their own ``tools_param``)."""

from __future__ import annotations

from functools import lru_cache

import orjson
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from app.errors import bad_request
from app.pipeline.ask import Ask
from app.settings import Settings


@lru_cache(maxsize=4096)
def schema_problem(encoded: bytes) -> str | None:
    """Why a tool's JSON schema (canonical JSON text) is invalid, or ``None``. Cached: agents send
    the same tools with every request, and checking a schema costs far more than hashing it."""
    try:
        Draft202012Validator.check_schema(orjson.loads(encoded))
    except SchemaError as exc:
        return exc.message
    return None


def check_ask(ask: Ask, settings: Settings, tools_param: str = "tools", schema_key: str = "function.parameters") -> None:
    """Limits (messages, tools, schema size, max tokens) and tool-choice consistency."""
    if len(ask.turns) > settings.max_messages:
        raise bad_request(f"too many messages ({len(ask.turns)} > {settings.max_messages})", "messages")
    if len(ask.tools) > settings.max_tools:
        raise bad_request(f"too many tools ({len(ask.tools)} > {settings.max_tools})", tools_param)
    for i, tool in enumerate(ask.tools):
        schema = tool["function"].get("parameters")
        if schema is None:
            continue
        where = f"{tools_param}[{i}].{schema_key}"
        encoded = orjson.dumps(schema, option=orjson.OPT_SORT_KEYS)
        if len(encoded) > settings.max_tool_schema_bytes:
            raise bad_request(f"{where} is larger than {settings.max_tool_schema_bytes} bytes",
                              f"{tools_param}.{i}.{schema_key}")
        problem = schema_problem(encoded)
        if problem is not None:
            raise bad_request(f"{where} is not a valid JSON schema: {problem}", f"{tools_param}.{i}.{schema_key}")
    if ask.tool_choice == "required" and not ask.tools:
        raise bad_request('tool_choice "required" needs tools', "tool_choice")
    if ask.named_tool is not None and ask.named_tool not in {t["function"]["name"] for t in ask.tools}:
        raise bad_request(f"tool_choice names {ask.named_tool!r}, which is not in tools", "tool_choice")
    limit = ask.sampling.max_tokens
    if settings.max_tokens_cap and limit and limit > settings.max_tokens_cap:
        raise bad_request(f"max_tokens exceeds this server's cap of {settings.max_tokens_cap}", "max_tokens")
