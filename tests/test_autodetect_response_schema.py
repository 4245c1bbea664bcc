"""``--tool-call-parser response-schema``: transformers-style response schemas, whole-message
parsing delivered at the end of the stream (the OpenAI contract still holds)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from detectors.tools.response_schema import ResponseSchema, SchemaError, load_response_schema, parse_with_schema
from parsers import CallStart, fold
from parsers.response import build_response_parser
from tests.harness import check_stream_invariants, comparable, run_all_chunkings

TEMPLATES = Path(__file__).parent / "data" / "templates"

# Qwen 3: reasoning, content, JSON calls wrapped into OpenAI's shape with a JMESPath transform
QWEN3_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "role": {"const": "assistant"},
        "thinking": {"type": "string", "x-regex": r"^\s*<think>\s*(.*?)\s*</think>"},
        "content": {"type": "string", "x-regex": r"^(?:\s*<think>.*?</think>)?\s*(.*?)\s*(?:<tool_call>|$)"},
        "tool_calls": {
            "type": "array",
            "x-regex-iterator": r"<tool_call>\s*(.+?)\s*</tool_call>",
            "items": {
                "type": "object",
                "x-parser": "json",
                "x-parser-args": {"transform": "{type: 'function', function: @}"},
                "properties": {
                    "type": {"const": "function"},
                    "function": {"type": "object", "properties": {
                        "name": {"type": "string"}, "arguments": {"type": "object", "additionalProperties": {}}}},
                },
            },
        },
    },
}

# GLM 4.5: one regex with named groups, names by regex, arguments by key/value pairs
GLM_SCHEMA: dict[str, Any] = {
    "x-regex": r"^(?:\n?<think>\n?(?:(?P<reasoning_content>.*?\S.*?)\n?|[\s]*)</think>\s*)?"
               r"(?P<content>(?:(?!<tool_call>)[\s\S])*?)(?:\n(?=<tool_call>))?(?=(?:<tool_call>|$))"
               r"(?P<tool_calls>(?:<tool_call>(?:(?!</tool_call>)[\s\S])+</tool_call>\s*)+)?$",
    "type": "object",
    "properties": {
        "role": {"const": "assistant"},
        "content": {"type": "string"},
        "reasoning_content": {"type": "string"},
        "tool_calls": {
            "type": "array",
            "x-regex-iterator": r"<tool_call>\s*(.+?)\s*</tool_call>",
            "items": {"type": "object", "properties": {
                "type": {"const": "function"},
                "function": {"type": "object", "properties": {
                    "name": {"type": "string", "x-regex": r"^(\S+)"},
                    "arguments": {"type": "object",
                                  "x-regex-key-value": r"<arg_key>(?P<key>[^<]+)</arg_key>\s*\n<arg_value>(?P<value>.*?)"
                                                       r"</arg_value>",
                                  "default": {},
                                  "additionalProperties": {"x-parser": "json", "x-parser-args": {"allow_non_json": True}}},
                }},
            }},
        },
    },
}


def test_qwen3_schema() -> None:
    text = '<think>\nweather\n</think>\n\nSure.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}' \
           '\n</tool_call>\n<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>'
    parsed = parse_with_schema(text, QWEN3_SCHEMA)
    assert parsed["role"] == "assistant" and parsed["thinking"] == "weather" and parsed["content"] == "Sure."
    assert parsed["tool_calls"] == [
        {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
        {"type": "function", "function": {"name": "get_time", "arguments": {}}}]
    assert "tool_calls" not in parse_with_schema("Just text.", QWEN3_SCHEMA)


def test_glm_schema_key_values() -> None:
    text = "<think>hm</think>Here.\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n" \
           "<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n</tool_call>"
    parsed = parse_with_schema(text, GLM_SCHEMA)
    assert parsed["reasoning_content"] == "hm" and parsed["content"] == "Here."
    assert parsed["tool_calls"][0]["function"] == {"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}


def test_schema_keywords() -> None:
    node = {"type": "object", "required": ["n"], "properties": {
        "n": {"type": "integer", "x-regex": r"n=(\d+)"}, "ok": {"type": "boolean", "x-regex": r"ok=(\w+)"},
        "f": {"type": "number", "x-regex-substitutions": [[",", "."]], "x-regex": r"f=([\d.]+)"},
        "pair": {"type": "array", "prefixItems": [{"type": "string"}],
                                                           "x-regex": r"p=(\w+)"}}}
    assert parse_with_schema("n=4 ok=TRUE f=1,5 p=z", node) == {"n": 4, "ok": True, "f": 1.5, "pair": ["z"]}
    with pytest.raises(SchemaError):
        parse_with_schema("nothing", node)  # "n" is required
    # a property missing from structured content takes its default; const ignores the input
    dict_node = {"type": "object", "x-parser": "json", "properties": {
        "a": {"type": "string"}, "d": {"type": "string", "default": "x"}, "k": {"const": 1}},
        "additionalProperties": False}
    assert parse_with_schema('{"a": "y", "extra": 2}', dict_node) == {"a": "y", "d": "x", "k": 1}
    with pytest.raises(SchemaError):
        parse_with_schema("x", {"type": "array", "x-regex-key-value": r"(?P<key>a)(?P<value>b)"})


def _parser_cls(schema: dict[str, Any]) -> type:
    return ResponseSchema.with_schema(schema)


def test_detector_delivers_everything_at_the_end() -> None:
    cls = _parser_cls(QWEN3_SCHEMA)
    text = 'Sure.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    chain = build_response_parser([], cls, None, None)
    assert all(chain.feed(ch) == [] for ch in text)  # nothing before the end: the schema needs the whole message
    events = chain.end()
    message = fold(events)
    assert message.content == "Sure."
    assert [(c.name, json.loads(c.arguments)) for c in message.calls] == [("get_weather", {"city": "Paris"})]
    assert isinstance(events[-3], CallStart) and events[-3].index == 0


@pytest.mark.parametrize(("schema", "text", "expected"), [
    (QWEN3_SCHEMA, '<think>\nwhy\n</think>\n\nOk.<tool_call>{"name": "f", "arguments": {"a": "<tool_call>"}}</tool_call>',
     {"content": "Ok.", "reasoning": "why", "calls": [("f", {"a": "<tool_call>"})]}),
    (QWEN3_SCHEMA, "Plain answer, no calls.", {"content": "Plain answer, no calls.", "reasoning": "", "calls": []}),
    (QWEN3_SCHEMA, '<tool_call>{"name": "f", "arguments": {"a": </tool_call>',  # not JSON: passed through
     {"content": '<tool_call>{"name": "f", "arguments": {"a": </tool_call>', "reasoning": "", "calls": []}),
    (GLM_SCHEMA, "<tool_call>f\n<arg_key>q</arg_key>\n<arg_value>héllo</arg_value>\n</tool_call>",
     {"content": "", "reasoning": "", "calls": [("f", {"q": "héllo"})]}),
])
def test_detector_in_every_chunking(schema: dict[str, Any], text: str, expected: dict[str, Any]) -> None:
    cls = _parser_cls(schema)
    whole, streams = run_all_chunkings(lambda: build_response_parser([], cls, None, None), text, ["<tool_call>"])
    got = comparable(whole)
    assert got["content"] == expected["content"] and got["reasoning"] == expected["reasoning"]
    assert [(n, json.loads(a)) for n, a, _ in got["calls"]] == expected["calls"]
    for events in streams.values():
        assert comparable(fold(events)) == got
        assert not check_stream_invariants(events, (), "")


def test_load_response_schema(tmp_path: Path) -> None:
    (tmp_path / "schema.json").write_text(json.dumps(QWEN3_SCHEMA))
    assert load_response_schema(tmp_path / "schema.json") == QWEN3_SCHEMA
    config = {"chat_template": "{{ messages }}", "response_schema": GLM_SCHEMA}
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    assert load_response_schema(tmp_path) == GLM_SCHEMA
    (tmp_path / "other.json").write_text(json.dumps({"chat_template": "x"}))
    with pytest.raises(ValueError, match="no response_schema"):
        load_response_schema(tmp_path / "other.json")


def test_runtime_wiring(tmp_path: Path) -> None:
    import httpx

    from app.backends import BACKEND_TYPES, Backend
    from app.runtime import ParserConfigError, validate_parser_names
    from app.served import ServedModel, choose_parsers
    from app.settings import Settings

    schema_file = tmp_path / "schema.json"
    schema_file.write_text(json.dumps(QWEN3_SCHEMA))
    settings = Settings(tool_call_parser="response-schema", response_schema=schema_file, reasoning_parser="qwen3")
    choice = choose_parsers(settings, None)
    assert isinstance(choice.tools, type) and choice.tools.schema == QWEN3_SCHEMA
    assert choice.reasoning == "qwen3"
    model = ServedModel.of("m", Backend("http://unused", httpx.AsyncClient(), dialect=BACKEND_TYPES["openai"]), None, choice)
    assert model.describe(None)["tool_call_parser"] == "response-schema(schema.json)"
    with pytest.raises(ParserConfigError, match="needs --response-schema"):
        validate_parser_names(Settings(tool_call_parser="response-schema"))
    with pytest.raises(ParserConfigError, match="No such file"):
        validate_parser_names(Settings(tool_call_parser="response-schema",
                                       chat_template=tmp_path / "schema.json.missing"))


def test_cli_rejects_a_missing_schema() -> None:
    from app.cli import main

    assert main(["serve", "--backend", "http://127.0.0.1:9", "--tool-call-parser", "response-schema"]) == 2


def test_proxy_with_a_response_schema(backend_factory, proxy_factory, tmp_path: Path) -> None:
    from tests.conftest import client_for
    from tests.scripted_backend import Script

    config = {"chat_template": (TEMPLATES / "Qwen-Qwen3-0.6B.jinja").read_text(), "response_schema": QWEN3_SCHEMA}
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    backend = backend_factory("vllm", model="m")
    proxy = proxy_factory(backend=backend.url, chat_template=str(tmp_path), tool_call_parser="response-schema")
    output = '<think>\nLet me see.\n</think>\n\nChecking.\n<tool_call>\n{"name": "get_weather", ' \
             '"arguments": {"city": "Paris"}}\n</tool_call>'
    pieces = [output[i:i + 4] for i in range(0, len(output), 4)]
    backend.script(Script(pieces=pieces), Script(pieces=pieces))
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    client = client_for(proxy)
    whole = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], tools=tools)
    message = whole.choices[0].message
    assert message.content == "Checking."
    assert getattr(message, "reasoning_content", None) == "Let me see."
    assert message.tool_calls and message.tool_calls[0].function.name == "get_weather"
    assert whole.choices[0].finish_reason == "tool_calls"
    chunks = list(client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}],
                                                 tools=tools, stream=True))
    assert chunks[0].choices[0].delta.role == "assistant"
    calls = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    assert calls[0].id and calls[0].function.name == "get_weather" and calls[0].type == "function"
    assert json.loads("".join(tc.function.arguments or "" for tc in calls)) == {"city": "Paris"}
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "tool_calls"
