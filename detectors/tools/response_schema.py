"""Hugging Face ``response_schema``: parse the whole message with the schema a model ships.

transformers lets a tokenizer carry a ``response_schema`` (in ``tokenizer_config.json``): a JSON
schema whose nodes say how to cut the model's output apart. For a Qwen-style output::

    <think>Let me check.</think>Sure.<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>

a schema like ::

    {"type": "object", "properties": {
       "role": {"const": "assistant"},
       "thinking": {"type": "string", "x-regex": "<think>(.*?)</think>"},
       "content": {"type": "string", "x-regex": "(?:</think>)?(.*?)(?:<tool_call>|$)"},
       "tool_calls": {"type": "array", "x-regex-iterator": "<tool_call>(.*?)</tool_call>",
                      "items": {"type": "object", "x-parser": "json",
                                "x-parser-args": {"transform": "{type: 'function', function: @}"},
                                "properties": {"type": {"const": "function"}, "function": {"type": "object"}}}}}}

yields reasoning ``Let me check.``, content ``Sure.`` and one call. The node keywords (as
transformers documents them): ``x-regex`` (one match; named groups give an object, one unnamed
group a string), ``x-regex-iterator`` (every match, for arrays), ``x-regex-key-value`` (named
groups ``key`` and ``value``, for objects), ``x-regex-substitutions`` (``[pattern, replacement]``
pairs applied first), ``x-parser: json`` with ``x-parser-args`` (``transform``: a JMESPath
expression; ``allow_non_json``), ``const``, ``default``, ``required``, ``additionalProperties``,
``items`` / ``prefixItems``. Regexes are matched with ``re.DOTALL``.

The schema describes a whole message, so the detector holds the output and delivers everything
at the end of the stream, in order: reasoning, content, then the calls (each whole). An output the
schema cannot parse passes through as content. The schema comes from ``--response-schema FILE``
(a schema, or a ``tokenizer_config.json`` holding one) or from the chat template's
``tokenizer_config.json`` (``load_response_schema``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Generator, Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any, ClassVar

from parsers.declare import Cursor, Out, ToolCallDetector


class SchemaError(ValueError):
    """The output does not fit the schema (or the schema is malformed)."""


@lru_cache(maxsize=64)
def _regex(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern, re.DOTALL)


def _match_value(match: re.Match[str]) -> Any:
    """Named groups → a dict of the groups that matched; else the single unnamed group."""
    named = {k: v for k, v in match.groupdict().items() if v is not None}
    if named:
        return named
    groups = match.groups()
    if len(groups) != 1:
        raise SchemaError(f"a regex needs named groups or exactly one group: {match.re.pattern!r}")
    return groups[0]


def _jmespath(expression: str, value: Any) -> Any:
    import jmespath  # optional dependency, imported only where a schema uses a transform

    return jmespath.search(expression, value)


def parse_with_schema(content: Any, node: Mapping[str, Any]) -> Any:  # noqa: C901 — transformers' response_schema: one branch per schema construct it defines
    """Parse ``content`` (the output text at the root) with one schema node, recursively."""
    if "const" in node:
        return node["const"]
    if content is None:
        return None
    kind = node.get("type")
    if any(k in node for k in ("x-regex", "x-regex-iterator", "x-regex-key-value", "x-regex-substitutions")) \
            and not isinstance(content, str):
        raise SchemaError("a regex node needs text")
    for pattern, replacement in node.get("x-regex-substitutions", ()):
        content = _regex(pattern).sub(replacement, content)
    if "x-regex" in node:
        match = _regex(node["x-regex"]).search(content)
        if match is None:
            return None
        content = _match_value(match)
    if "x-regex-iterator" in node:
        if kind != "array":
            raise SchemaError("x-regex-iterator needs an array node")
        items = [_match_value(m) for m in _regex(node["x-regex-iterator"]).finditer(content)]
        if not items:
            return None
        content = items
    if "x-regex-key-value" in node:
        if kind != "object":
            raise SchemaError("x-regex-key-value needs an object node")
        pairs: dict[str, Any] = {}
        for match in _regex(node["x-regex-key-value"]).finditer(content):
            groups = match.groupdict()
            if "key" not in groups or "value" not in groups:
                raise SchemaError("x-regex-key-value needs groups named key and value")
            pairs[groups["key"]] = groups["value"]
        if not pairs:
            return None
        content = pairs
    if "x-parser" in node:
        if node["x-parser"] != "json":
            raise SchemaError(f"unknown x-parser {node['x-parser']!r}")
        args = node.get("x-parser-args") or {}
        if not isinstance(content, str):
            raise SchemaError("the json parser needs text")
        try:
            content = json.loads(content)
        except ValueError:
            if not args.get("allow_non_json"):
                raise SchemaError("not JSON") from None
        if args.get("transform") is not None:
            content = _jmespath(args["transform"], content)
    return _typed(content, node, kind)


def _typed(content: Any, node: Mapping[str, Any], kind: Any) -> Any:  # noqa: C901 — transformers' response_schema: one branch per JSON type
    if kind == "object":
        return _object(content, node)
    if kind == "array":
        if not content:
            return []
        if "items" in node:
            if not isinstance(content, list):
                raise SchemaError("an array node needs a list")
            return [parse_with_schema(item, node["items"]) for item in content]
        if "prefixItems" in node:
            prefix = node["prefixItems"]
            content = content if isinstance(content, list) else [content] if len(prefix) == 1 else None
            if content is None or len(content) != len(prefix):
                raise SchemaError("prefixItems do not match")
            return [parse_with_schema(item, schema) for item, schema in zip(content, prefix, strict=True)]
        raise SchemaError("an array node needs items")
    if kind == "integer":
        return content if isinstance(content, int) and not isinstance(content, bool) else int(str(content).strip())
    if kind == "number":
        return content if isinstance(content, (int, float)) and not isinstance(content, bool) \
            else float(str(content).strip())
    if kind == "boolean":
        if isinstance(content, bool):
            return content
        text = str(content).strip().lower()
        if text in ("true", "1"):
            return True
        if text in ("false", "0"):
            return False
        raise SchemaError(f"not a boolean: {content!r}")
    if kind == "string":
        if not isinstance(content, str):
            raise SchemaError("a string node needs text")
        return content
    if kind in (None, "any"):
        return content
    raise SchemaError(f"unsupported schema type {kind!r}")


def _object(content: Any, node: Mapping[str, Any]) -> dict[str, Any]:
    properties: Mapping[str, Any] = node.get("properties") or {}
    parsed: dict[str, Any] = {}
    if isinstance(content, str):
        if not properties:
            raise SchemaError("an object node with text needs properties")
        for key, child in properties.items():  # every property parses the whole text itself
            value = parse_with_schema(content, child)
            if value is not None:
                parsed[key] = value
    elif isinstance(content, Mapping):
        for key, child in properties.items():
            if "const" in child:
                parsed[key] = child["const"]
            elif key in content:
                parsed[key] = parse_with_schema(content[key], child)
            elif "default" in child:
                parsed[key] = child["default"]
        extra = node.get("additionalProperties", {})
        if extra is not False:
            child = extra if isinstance(extra, Mapping) else {}
            for key, value in content.items():
                if key not in properties:
                    parsed[key] = parse_with_schema(value, child)
    else:
        raise SchemaError("an object node needs text or an object")
    missing = [k for k in node.get("required", ()) if k not in parsed]
    if missing:
        raise SchemaError(f"required fields missing: {missing}")
    return parsed


def _arguments(value: Any) -> str | None:
    """A call's arguments as JSON object text (an object, or text holding one)."""
    if value is None:
        return "{}"
    if isinstance(value, Mapping):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, str):
        try:
            decoded = json.loads(value)
        except ValueError:
            return None
        return value if isinstance(decoded, dict) else None
    return None


def _calls(value: Any) -> list[tuple[str, str, str | None]] | None:
    """``(name, arguments JSON, id)`` per call; None when a call is unusable."""
    out = []
    for item in value or ():
        if not isinstance(item, Mapping):
            return None
        nested = item.get("function")
        function: Mapping[str, Any] = nested if isinstance(nested, Mapping) else item
        name = function.get("name")
        arguments = _arguments(function.get("arguments", function.get("parameters")))
        if not isinstance(name, str) or not name or arguments is None:
            return None
        call_id = item.get("id")
        out.append((name, arguments, call_id if isinstance(call_id, str) and call_id else None))
    return out


class ResponseSchema(ToolCallDetector):
    """Whole-message parsing with a response schema (``with_schema`` makes the class for one).

    It has no ``format``: the schema's regexes say how to cut a message apart, not how to write
    one, so there is no wire (tool_choice is not constrained for it) and ``body`` is its code."""

    schema: ClassVar[Mapping[str, Any] | None] = None
    label: ClassVar[str] = "response-schema"

    @classmethod
    def with_schema(cls, schema: Mapping[str, Any], label: str = "response-schema") -> type[ResponseSchema]:
        if not isinstance(schema, Mapping):
            raise ValueError("a response schema is a JSON object")  # noqa: TRY004 — callers report ValueErrors
        return type("ResponseSchemaParser", (cls,), {"schema": dict(schema), "label": label,
                                                     "__module__": __name__})

    def has_tool_call(self, text: str) -> bool:
        if self.schema is None:
            return False
        try:
            parsed = parse_with_schema(text, self.schema)
        except (SchemaError, ValueError, TypeError, re.error):
            return False
        return isinstance(parsed, Mapping) and bool(parsed.get("tool_calls"))

    def body(self, cur: Cursor, out: Out) -> Generator[None, None, Any]:
        parts: list[str] = []
        yield from cur.rest(parts.append)  # the schema describes the whole message: hold it
        text = "".join(parts)
        try:
            parsed = parse_with_schema(text, self.schema) if self.schema is not None else None
        except (SchemaError, ValueError, TypeError, KeyError, re.error, ImportError):
            parsed = None
        calls = _calls(parsed.get("tool_calls")) if isinstance(parsed, Mapping) else None
        if not isinstance(parsed, Mapping) or calls is None:
            out.content.write(text)
            return
        reasoning = parsed.get("reasoning_content", parsed.get("thinking"))
        if isinstance(reasoning, str) and reasoning.strip():
            out.reasoning.write(reasoning)
        content = parsed.get("content")
        if isinstance(content, str):
            out.content.write(content)
        elif not calls and not reasoning:
            out.content.write(text)
        for name, arguments, call_id in calls:
            out.calls.begin()
            out.calls.header(name, call_id)
            out.calls.args(arguments)
            out.calls.end(True)


def load_response_schema(path: str | Path) -> dict[str, Any]:
    """A response schema from a JSON file: the schema itself, or a ``tokenizer_config.json``
    (or a model directory holding one) with a ``response_schema`` key."""
    path = Path(path)
    if path.is_dir():
        path = path / "tokenizer_config.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    if isinstance(data, dict) and isinstance(data.get("response_schema"), dict):
        schema: dict[str, Any] = data["response_schema"]
        return schema
    if isinstance(data, dict) and ("properties" in data or "x-regex" in data or "type" in data) \
            and "chat_template" not in data:
        return data
    raise ValueError(f"{path} holds no response_schema")
