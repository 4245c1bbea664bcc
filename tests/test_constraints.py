"""Constrained decoding: the constraint produced per backend and per detector, checked against
the detector's own wire format (a call it writes is accepted, a bad one rejected) and, over
HTTP, the tool_choice semantics end to end on scripted vLLM / llama.cpp / generic backends."""

from __future__ import annotations

import json
import sys
from typing import Any

import httpx
import jsonschema
import pytest

from app.constraints.gbnf import Grammar
from app.constraints.tools import ReasoningGate, build_constraint, calls_array_schema, calls_grammar, structural_tag
from parsers import FunctionCallParser
from parsers.registry import TOOL_PARSERS, tool_detector_class
from parsers.shapes.nestedxml import NestedXml
from parsers.tools import to_specs
from parsers.wire import JsonArgs, XmlParams
from tests.conftest import QWEN3_TEMPLATE, client_for
from tests.gbnf_check import accepts
from tests.scripted_backend import Script

sys.setrecursionlimit(20000)

TOOLS: list[dict[str, Any]] = [
    {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["c", "f"]},
                       "days": {"type": "integer"}},
        "required": ["city", "unit"]}}},
    {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}},
]
SPECS = to_specs(TOOLS)
GOOD = [("get_weather", {"city": 'Paris "Ville"', "unit": "c", "days": 3}), ("get_time", {})]
WIRE_DETECTORS = sorted(n for n in TOOL_PARSERS if tool_detector_class(n).wire is not None)


def test_wire_formats_cover_the_issue_list() -> None:
    assert {"qwen25", "hermes", "llama3", "mistral", "kimi_k2", "glm45", "qwen3_coder", "deepseekv31"} \
        <= set(WIRE_DETECTORS)


@pytest.mark.parametrize("name", WIRE_DETECTORS)
def test_wire_format_round_trips_through_its_detector(name: str) -> None:
    wire = tool_detector_class(name).wire
    content, calls = FunctionCallParser(TOOLS, name).parse_non_stream(wire.render(GOOD))
    assert [(c.name, json.loads(c.parameters)) for c in calls] == [(n, a) for n, a in GOOD]
    assert content.strip() == ""


@pytest.mark.parametrize("name", WIRE_DETECTORS)
def test_required_grammar_accepts_own_calls_and_rejects_bad_ones(name: str) -> None:
    wire = tool_detector_class(name).wire
    grammar = calls_grammar(wire, SPECS, None)
    assert accepts(grammar, wire.render(GOOD))
    assert accepts(grammar, wire.render(GOOD[:1]))
    assert not accepts(grammar, wire.render([("get_weather", {"city": "Paris", "unit": "kelvin"})])), "enum"
    assert not accepts(grammar, wire.render([("launch_rocket", {})])), "unknown tool"
    assert not accepts(grammar, wire.render([("get_weather", {"city": "Paris"})])), "missing required"
    if not isinstance(wire.args, XmlParams | NestedXml):  # XML-style parameters are untyped text
        assert not accepts(grammar, wire.render([("get_weather", {"city": 5, "unit": "c"})])), "type"
    single = calls_grammar(wire, SPECS, 1)
    assert accepts(single, wire.render(GOOD[:1])) and not accepts(single, wire.render(GOOD))


@pytest.mark.parametrize("name", WIRE_DETECTORS)
def test_reasoning_block_stays_free(name: str) -> None:
    wire = tool_detector_class(name).wire
    call = wire.render(GOOD[:1])
    outside = calls_grammar(wire, SPECS, None, ReasoningGate("<think>", "</think>", inside=False))
    assert accepts(outside, "<think>\nany thoughts, even <tags> and {json}\n</think>\n" + call)
    assert accepts(outside, call)
    inside = calls_grammar(wire, SPECS, None, ReasoningGate("<think>", "</think>", inside=True))
    assert accepts(inside, "still thinking</think> " + call)
    lazy = calls_grammar(wire, SPECS, None, ReasoningGate("<think>", "</think>", False), lazy=True)
    assert accepts(lazy, call) and not accepts(lazy, "<think>x</think>" + call)


def test_vllm_required_schema_is_an_array_of_calls() -> None:
    schema = calls_array_schema(SPECS, None)
    jsonschema.validate([{"name": n, "arguments": a} for n, a in GOOD], schema)
    for bad in ([], [{"name": "get_weather", "arguments": {"city": "x", "unit": "kelvin"}}],
                [{"name": "nope", "arguments": {}}], [{"name": "get_time"}]):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate([{"name": "get_time", "arguments": {}}] * 2, calls_array_schema(SPECS, 1))


@pytest.mark.parametrize("name", [n for n in WIRE_DETECTORS if isinstance(tool_detector_class(n).wire.args, JsonArgs)])
def test_structural_tag_spells_the_wire_format(name: str) -> None:
    wire = tool_detector_class(name).wire
    tag = structural_tag(wire, SPECS)
    assert tag["triggers"] == [wire.trigger]
    first = tag["structures"][0]
    text = first["begin"] + json.dumps(GOOD[0][1]) + first["end"]
    text = wire.section[0] + text + wire.section[1]
    _, calls = FunctionCallParser(TOOLS, name).parse_non_stream(text)
    assert [(c.name, json.loads(c.parameters)) for c in calls] == [GOOD[0]]
    jsonschema.validate(GOOD[0][1], first["schema"])


def test_constraint_fields_per_backend() -> None:
    wire = tool_detector_class("qwen25").wire
    required = build_constraint("llamacpp", "required", None, SPECS, wire, True)
    assert required.fields["grammar_lazy"] is False and "root ::=" in required.fields["grammar"]
    auto = build_constraint("llamacpp", "auto", None, SPECS, wire, True)
    assert auto.fields["grammar_lazy"] is True
    assert auto.fields["grammar_triggers"] == [{"type": 1, "value": "<tool_call>"}]
    vllm = build_constraint("vllm", "required", None, SPECS, wire, False)
    assert vllm.output == "json_array" and vllm.fields["structured_outputs"]["json"]["maxItems"] == 1
    legacy = build_constraint("vllm", "required", None, SPECS, wire, True, legacy_vllm=True)
    assert "guided_json" in legacy.fields and "structured_outputs" not in legacy.fields
    named = build_constraint("vllm", None, "get_weather", SPECS, wire, True)
    assert named.output == "named_args" and named.fields["structured_outputs"]["json"] == TOOLS[0]["function"][
        "parameters"]
    assert build_constraint("openai", "required", None, SPECS, wire, True).fields == {}
    assert build_constraint("vllm", "auto", None, SPECS, wire, True).fields == {}
    strict = to_specs([{**TOOLS[0], "function": {**TOOLS[0]["function"], "strict": True}}])
    tag = json.loads(build_constraint("vllm", "auto", None, strict, wire, True).fields["structured_outputs"]
                     ["structural_tag"])
    assert tag["type"] == "structural_tag" and tag["triggers"] == ["<tool_call>"]
    fmt = build_constraint("llamacpp", "none", None, SPECS, wire, True,
                           response_format={"type": "json_schema", "json_schema": {"schema": {"type": "object"}}})
    assert fmt.fields == {"json_schema": {"type": "object"}}
    assert build_constraint("vllm", None, None, [], None, True, response_format={"type": "json_object"}).fields == \
        {"structured_outputs": {"json_object": True}}


def test_json_schema_grammar_handles_common_constructs() -> None:
    g = Grammar()
    schema = {"type": "object", "properties": {
        "a": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
        "b": {"type": "array", "items": {"type": "string", "maxLength": 3}, "minItems": 1, "maxItems": 2},
        "c": {"$ref": "#/$defs/node"}, "d": {"type": ["boolean", "string"]}, "e": {"const": "x"}},
        "required": ["a"], "$defs": {"node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/node"}}}}}
    grammar = g.render(g.schema(schema))
    assert accepts(grammar, '{"a": null, "b": ["abc"], "c": {"next": {}}, "d": true, "e": "x"}')
    assert accepts(grammar, '{"a": 1}')
    assert not accepts(grammar, '{"a": 1, "b": []}')
    assert not accepts(grammar, '{"a": 1, "b": ["abcd"]}')
    assert not accepts(grammar, '{"b": ["a"]}')


# ------------------------------------------------------------------------------------ over HTTP


def test_vllm_required_streams_calls_from_the_json_array(qwen3_vllm) -> None:
    backend, proxy = qwen3_vllm
    pieces = ['[{"name": "get_weather", "argu', 'ments": {"city": "Pa', 'ris", "unit": "c"}}, ',
              '{"name": "get_time", "arguments": {}}]']
    backend.script(Script(pieces=pieces, delay=0.005), Script(pieces=pieces))
    client = client_for(proxy)
    chunks = list(client.chat.completions.create(model="x", messages=[{"role": "user", "content": "hi"}],
                                                 tools=TOOLS, tool_choice="required", stream=True))
    body = backend.bodies()[-1]
    schema = body["structured_outputs"]["json"]
    assert schema["type"] == "array" and schema["minItems"] == 1 and "maxItems" not in schema
    deltas = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    assert [d.function.name for d in deltas if d.function and d.function.name] == ["get_weather", "get_time"]
    assert sum(1 for d in deltas if d.index == 0) >= 3, "arguments stream in fragments"
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    whole = client.chat.completions.create(model="x", messages=[{"role": "user", "content": "hi"}], tools=TOOLS,
                                           tool_choice="required")
    calls = whole.choices[0].message.tool_calls
    assert [json.loads(c.function.arguments) for c in calls] == [{"city": "Paris", "unit": "c"}, {}]


def test_vllm_named_choice_streams_the_arguments_object(qwen3_vllm) -> None:
    backend, proxy = qwen3_vllm
    backend.script(Script(pieces=['{"city": ', '"Oslo", "unit": "f"}']))
    result = client_for(proxy).chat.completions.create(
        model="x", messages=[{"role": "user", "content": "hi"}], tools=TOOLS,
        tool_choice={"type": "function", "function": {"name": "get_weather"}})
    body = backend.bodies()[-1]
    assert body["structured_outputs"]["json"] == TOOLS[0]["function"]["parameters"]
    assert "get_time" not in body["prompt"], "only the named tool is rendered"
    call = result.choices[0].message.tool_calls[0]
    assert call.function.name == "get_weather" and json.loads(call.function.arguments)["city"] == "Oslo"
    assert result.choices[0].finish_reason == "stop"


def test_parallel_tool_calls_false(qwen3_vllm, backend_factory, proxy_factory) -> None:
    backend, proxy = qwen3_vllm
    client_for(proxy).chat.completions.create(model="x", messages=[{"role": "user", "content": "hi"}], tools=TOOLS,
                                              tool_choice="required", parallel_tool_calls=False)
    assert backend.bodies()[-1]["structured_outputs"]["json"]["maxItems"] == 1
    generic = backend_factory("openai")
    proxy2 = proxy_factory(backend=generic.url, chat_template=str(QWEN3_TEMPLATE), tool_call_parser="qwen25")
    two = '<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>\n'
    generic.script(Script(pieces=[two, two]))
    result = client_for(proxy2).chat.completions.create(model="x", messages=[{"role": "user", "content": "hi"}],
                                                        tools=TOOLS, parallel_tool_calls=False)
    assert len(result.choices[0].message.tool_calls) == 1
    assert not any(k in generic.bodies()[-1] for k in ("structured_outputs", "guided_json", "grammar"))


def test_vllm_legacy_guided_fields(backend_factory, proxy_factory) -> None:
    backend = backend_factory("vllm")
    proxy = proxy_factory(backend=backend.url, chat_template=str(QWEN3_TEMPLATE), tool_call_parser="qwen25",
                          vllm_legacy_guided=True)
    backend.script(Script(pieces=['[{"name": "get_time", "arguments": {}}]']))
    client_for(proxy).chat.completions.create(model="x", messages=[{"role": "user", "content": "hi"}], tools=TOOLS,
                                              tool_choice="required")
    body = backend.bodies()[-1]
    assert body["guided_json"]["type"] == "array" and "structured_outputs" not in body


def test_llamacpp_required_and_auto_grammars(backend_factory, proxy_factory) -> None:
    backend = backend_factory("llamacpp", chat_template=QWEN3_TEMPLATE.read_text())
    proxy = proxy_factory(backend=backend.url, reasoning_parser="qwen3", tool_call_parser="qwen25")
    call = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome", "unit": "c"}}\n</tool_call>'
    backend.script(Script(pieces=["<think>ok</think>", call]), Script(pieces=["Hello"]))
    client = client_for(proxy)
    result = client.chat.completions.create(model="x", messages=[{"role": "user", "content": "hi"}], tools=TOOLS,
                                            tool_choice="required")
    body = backend.bodies()[-1]
    assert body["grammar_lazy"] is False
    assert accepts(body["grammar"], "<think>ok</think>" + call), "the grammar leaves the reasoning block free"
    assert "<tool_call>" in body["preserved_tokens"]
    assert result.choices[0].message.tool_calls[0].function.name == "get_weather"
    client.chat.completions.create(model="x", messages=[{"role": "user", "content": "hi"}], tools=TOOLS)
    body = backend.bodies()[-1]
    assert body["grammar_lazy"] is True and body["grammar_triggers"] == [{"type": 1, "value": "<tool_call>"}]


def test_response_format_json_schema(backend_factory, proxy_factory) -> None:
    backend = backend_factory("vllm")
    proxy = proxy_factory(backend=backend.url, chat_template=str(QWEN3_TEMPLATE))
    backend.script(Script(pieces=['{"answer": 4}']))
    result = client_for(proxy).chat.completions.create(
        model="x", messages=[{"role": "user", "content": "2+2"}],
        response_format={"type": "json_schema", "json_schema": {"name": "a", "schema": {
            "type": "object", "properties": {"answer": {"type": "integer"}}}}})
    assert backend.bodies()[-1]["structured_outputs"]["json"]["properties"]["answer"]["type"] == "integer"
    assert json.loads(result.choices[0].message.content) == {"answer": 4}


def test_required_without_a_tool_parser_still_yields_calls_on_vllm(backend_factory, proxy_factory) -> None:
    backend = backend_factory("vllm")
    proxy = proxy_factory(backend=backend.url, chat_template=str(QWEN3_TEMPLATE))
    backend.script(Script(pieces=['[{"name": "get_time", "arguments": {}}]']))
    result = client_for(proxy).chat.completions.create(model="x", messages=[{"role": "user", "content": "hi"}],
                                                       tools=TOOLS, tool_choice="required")
    assert result.choices[0].message.tool_calls[0].function.name == "get_time"


def test_invalid_tool_choice_combinations(qwen3_vllm) -> None:
    _, proxy = qwen3_vllm
    for extra in ({"tool_choice": "required"}, {"tools": TOOLS, "tool_choice": {"type": "function",
                                                                                 "function": {"name": "x"}}}):
        response = httpx.post(proxy.url + "/v1/chat/completions",
                              json={"messages": [{"role": "user", "content": "hi"}], **extra}, timeout=30)
        assert response.status_code == 400 and response.json()["error"]["param"] == "tool_choice"


def test_nested_element_grammar_follows_the_schema_into_objects_and_arrays() -> None:
    wire = tool_detector_class("minimax-m3").wire
    assert wire is not None
    schema = {"type": "object", "$defs": {"pt": {"type": "object", "properties": {"x": {"type": "number"}},
                                                 "required": ["x"]}},
              "properties": {"points": {"type": "array", "items": {"$ref": "#/$defs/pt"}},
                             "label": {"type": "string"}}, "required": ["points"]}
    specs = to_specs([{"type": "function", "function": {"name": "plot", "parameters": schema}}])
    grammar = calls_grammar(wire, specs, None)
    good = {"points": [{"x": 1.5}, {"x": -2}], "label": "a <b> c"}
    assert accepts(grammar, wire.render([("plot", good)]))
    _, calls = FunctionCallParser(specs, "minimax-m3").parse_non_stream(wire.render([("plot", good)]))
    assert [json.loads(c.parameters) for c in calls] == [good]
    assert not accepts(grammar, wire.render([("plot", {"points": [{"x": "left"}]})])), "nested type"
    assert not accepts(grammar, wire.render([("plot", {"points": [{}]})])), "nested required"
    assert not accepts(grammar, wire.render([("plot", {"label": "x"})])), "missing required"
