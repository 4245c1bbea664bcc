"""Tool names (issue 25, item 4): every face accepts MCP's characters — ASCII letters, digits,
``_``, ``-``, ``.`` and ``/``, 1 to 128 of them — and refuses anything else with a 400 that names
the field. A dotted or slashed name goes the whole way over HTTP: offered in ``tools``, rendered
into the prompt, written into the constraint sent upstream (a llama.cpp grammar, checked with
``tests.gbnf_check``; vLLM's JSON schema or structural tag), written by the model and read back as
the same name, streamed and not.

The formats themselves (every registered one, every chunking) are covered by
``tests/test_wire_roundtrip.py`` and the fixture files; here the faces and the backends."""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest
from canitoolcall.fixtures import load_fixtures

from app.constraints.tools import calls_grammar, structural_tag
from app.templates.autodetect import analyse_template_file
from parsers import build_response_parser, fold
from parsers.registry import tool_detector_class
from parsers.tools import to_specs
from tests.conftest import QWEN3_TEMPLATE, TEMPLATES, client_for
from tests.gbnf_check import accepts
from tests.harness import comparable, run_all_chunkings
from tests.scripted_backend import Script
from tests.test_wire_roundtrip import EDGE_NAMES

sys.setrecursionlimit(20000)  # the grammar checker recurses per rule

DOTTED, SLASHED = "weather.get", "user-profile/update"
PARAMS = {DOTTED: {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
          SLASHED: {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]}}
CALLS = [(DOTTED, {"city": "Paris"}), (SLASHED, {"id": 7})]
CHAT_TOOLS = [{"type": "function", "function": {"name": n, "parameters": p}} for n, p in PARAMS.items()]
RESPONSES_TOOLS = [{"type": "function", "name": n, "parameters": p} for n, p in PARAMS.items()]
MESSAGES_TOOLS = [{"name": n, "input_schema": p} for n, p in PARAMS.items()]
ASK = [{"role": "user", "content": "Weather in Paris, then update profile 7."}]
#: Qwen3 output calling both tools, the first call's arguments in pieces
QWEN_CALLS = ["<tool_call>\n", '{"name": "weather.get", ', '"arguments": {"city": "Pa', 'ris"}}', "\n</tool_call>\n",
              '<tool_call>\n{"name": "user-profile/update", "arguments": {"id": 7}}\n</tool_call>']
#: names every face refuses: a space, a quote, a newline, one character too many, non-ASCII, a colon
BAD_NAMES = ["get weather", 'get"weather', "get\nweather", "x" * 129, "naïve", "ns:get"]


def _calls(message: Any) -> list[tuple[str, dict[str, Any]]]:
    return [(c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls or []]


# ------------------------------------------------------------------ accepted on every face


def test_chat_accepts_dotted_and_slashed_names(qwen3_vllm) -> None:
    backend, proxy = qwen3_vllm
    backend.script(Script(pieces=QWEN_CALLS), Script(pieces=QWEN_CALLS))
    client = client_for(proxy)
    whole = client.chat.completions.create(model="m", messages=ASK, tools=CHAT_TOOLS)
    assert _calls(whole.choices[0].message) == CALLS
    assert f'"name": "{DOTTED}"' in backend.bodies()[-1]["prompt"], "the tool is offered under its name"
    with client.chat.completions.stream(model="m", messages=ASK, tools=CHAT_TOOLS) as stream:
        streamed = stream.get_final_completion()
    assert _calls(streamed.choices[0].message) == CALLS


def test_responses_accepts_dotted_and_slashed_names(qwen3_vllm) -> None:
    backend, proxy = qwen3_vllm
    namespace = {"type": "namespace", "name": "calendar", "description": "Calendar",
                 "tools": [{"type": "function", "name": "create.event", "parameters": {"type": "object"}}]}
    namespaced = '\n<tool_call>\n{"name": "calendar__create.event", "arguments": {}}\n</tool_call>'
    backend.script(Script(pieces=[*QWEN_CALLS, namespaced]), Script(pieces=[*QWEN_CALLS, namespaced]))
    client = client_for(proxy)
    whole = client.responses.create(model="m", input="go", tools=[*RESPONSES_TOOLS, namespace])
    with client.responses.stream(model="m", input="go", tools=[*RESPONSES_TOOLS, namespace]) as stream:
        streamed = stream.get_final_response()
    for response in (whole, streamed):
        items = [(i.name, json.loads(i.arguments), i.namespace) for i in response.output if i.type == "function_call"]
        assert items == [(DOTTED, {"city": "Paris"}, None), (SLASHED, {"id": 7}, None), ("create.event", {}, "calendar")]


def test_messages_accepts_dotted_and_slashed_names(qwen3_vllm) -> None:
    backend, proxy = qwen3_vllm
    backend.script(Script(pieces=QWEN_CALLS), Script(pieces=QWEN_CALLS))
    client = anthropic.Anthropic(base_url=proxy.url, api_key="unused", max_retries=0, timeout=30)
    whole = client.messages.create(model="m", max_tokens=100, messages=ASK, tools=MESSAGES_TOOLS)
    with client.messages.stream(model="m", max_tokens=100, messages=ASK, tools=MESSAGES_TOOLS) as stream:
        streamed = stream.get_final_message()
    for message in (whole, streamed):
        assert [(b.name, b.input) for b in message.content if b.type == "tool_use"] == CALLS
        assert message.stop_reason == "tool_use"


def test_canitoolcall_dotted_name_fixture_over_http(backend_factory, proxy_factory) -> None:
    """The fixture the issue names (``gemma4/vllm-dotted-function-name``, a 400 before): its tools
    offered, its recorded output served by vLLM, its expected call answered, streamed and not."""
    [fixture] = [f for f in load_fixtures(families=["gemma4"]) if f.id == "gemma4/vllm-dotted-function-name"]
    assert fixture.expected is not None
    backend = backend_factory("vllm", model="google/gemma-4-31B-it")
    proxy = proxy_factory(backend=backend.url, chat_template=str(TEMPLATES / "google-gemma-4-31B-it.jinja"),
                          tool_call_parser="gemma4", reasoning_parser="gemma4")
    backend.script(Script(pieces=_pieces(fixture.raw_output)), Script(pieces=_pieces(fixture.raw_output)))
    tools: list[Any] = [dict(t) for t in fixture.tools]
    client = client_for(proxy)
    whole = client.chat.completions.create(model="m", messages=ASK, tools=tools)
    with client.chat.completions.stream(model="m", messages=ASK, tools=tools) as stream:
        streamed = stream.get_final_completion()
    expected = [(c.name, dict(c.arguments)) for c in fixture.expected.tool_calls]
    assert expected == [("weather.get", {"location": "London"})]
    assert _calls(whole.choices[0].message) == _calls(streamed.choices[0].message) == expected
    assert not whole.choices[0].message.content


def test_the_longest_name_is_accepted_on_every_face(qwen3_vllm) -> None:
    backend, proxy = qwen3_vllm
    name = "a.b/c-d_" + "x" * 120
    assert len(name) == 128
    for path, body in _requests(name):
        backend.script(Script(pieces=["Hello"]))
        response = httpx.post(proxy.url + path, json=body, timeout=30)
        assert response.status_code == 200, (path, response.text)


# ------------------------------------------------------------------ refused with the field named


def _requests(name: str) -> list[tuple[str, dict[str, Any]]]:
    schema = {"type": "object", "properties": {}}
    return [
        ("/v1/chat/completions", {"model": "m", "messages": ASK,
                                  "tools": [{"type": "function", "function": {"name": name, "parameters": schema}}]}),
        ("/v1/responses", {"model": "m", "input": "go", "tools": [{"type": "function", "name": name,
                                                                  "parameters": schema}]}),
        ("/v1/messages", {"model": "m", "max_tokens": 10, "messages": ASK,
                          "tools": [{"name": name, "input_schema": schema}]}),
    ]


@pytest.mark.parametrize("name", BAD_NAMES, ids=["space", "quote", "newline", "129-chars", "non-ascii", "colon"])
def test_bad_names_are_400s_that_name_the_field(qwen3_vllm, name: str) -> None:
    backend, proxy = qwen3_vllm
    before = len(backend.bodies())
    chat, responses, messages = (httpx.post(proxy.url + path, json=body, timeout=30) for path, body in _requests(name))
    for response in (chat, responses, messages):
        assert response.status_code == 400, response.text
    assert chat.json()["error"]["param"] == "tools.0.function.name"
    assert chat.json()["error"]["message"].startswith("tools[0].function.name: ")
    assert responses.json()["error"]["param"] == "tools[0].name"
    assert messages.json()["type"] == "error" and messages.json()["error"]["type"] == "invalid_request_error"
    assert messages.json()["error"]["message"].startswith("tools[0].name: ")
    for response in (chat, responses, messages):
        assert "dots or slashes" in response.json()["error"]["message"], "the message says what is allowed"
    assert len(backend.bodies()) == before, "nothing reached the backend"


def test_responses_names_the_namespaced_tool(qwen3_vllm) -> None:
    _, proxy = qwen3_vllm
    for tools, param in (
        ([{"type": "namespace", "name": "cal endar", "tools": [{"type": "function", "name": "f"}]}], "tools[0].name"),
        ([{"type": "namespace", "name": "cal", "tools": [{"type": "function", "name": "a b"}]}],
         "tools[0].tools[0].name"),
        # each part fits, but the name the model is offered (NAMESPACE__NAME) would be too long
        ([{"type": "namespace", "name": "n" * 64, "tools": [{"type": "function", "name": "f" * 64}]}],
         "tools[0].tools[0].name"),
    ):
        response = httpx.post(proxy.url + "/v1/responses", json={"model": "m", "input": "go", "tools": tools},
                              timeout=30)
        assert response.status_code == 400 and response.json()["error"]["param"] == param, response.text


# ------------------------------------------------------------------ forced calls: the constraint sent upstream


def test_vllm_forced_calls_carry_the_names(qwen3_vllm) -> None:
    backend, proxy = qwen3_vllm
    client = client_for(proxy)
    array = '[{"name": "weather.get", "arguments": {"city": "Paris"}}, {"name": "user-profile/update", "arguments": {"id": 7}}]'
    backend.script(Script(pieces=[array]))
    required = client.chat.completions.create(model="m", messages=ASK, tools=CHAT_TOOLS, tool_choice="required")
    schema = backend.bodies()[-1]["structured_outputs"]["json"]
    assert [item["properties"]["name"]["const"] for item in schema["items"]["anyOf"]] == [DOTTED, SLASHED]
    assert _calls(required.choices[0].message) == CALLS
    # a named choice: the schema is the tool's arguments, the call is named after the choice
    backend.script(Script(pieces=['{"id": 7}']))
    named = client.chat.completions.create(model="m", messages=ASK, tools=CHAT_TOOLS,
                                           tool_choice={"type": "function", "function": {"name": SLASHED}})
    assert backend.bodies()[-1]["structured_outputs"]["json"] == PARAMS[SLASHED]
    assert _calls(named.choices[0].message) == [CALLS[1]]
    # strict tools under "auto": a structural tag whose begin text spells the call as the format does
    strict = [{"type": "function", "function": {**t["function"], "strict": True}} for t in CHAT_TOOLS]
    backend.script(Script(pieces=QWEN_CALLS))
    auto = client.chat.completions.create(model="m", messages=ASK, tools=strict)
    tag = json.loads(backend.bodies()[-1]["structured_outputs"]["structural_tag"])
    assert [s["begin"] for s in tag["structures"]] == [f'<tool_call>\n{{"name": "{n}", "arguments": ' for n in PARAMS]
    assert _calls(auto.choices[0].message) == CALLS


#: (tool parser, reasoning parser, template): formats whose names sit in different places — a JSON
#: string, Kimi's call id, Harmony's recipient, Gemma's call header, a pythonic call head, a tag
#: attribute, a recipient line
LLAMACPP_FORMATS = [
    ("qwen25", "qwen3", QWEN3_TEMPLATE),
    ("kimi_k2", None, TEMPLATES / "moonshotai-Kimi-K2.jinja"),
    ("gpt-oss", None, TEMPLATES / "openai-gpt-oss-120b.jinja"),
    ("gemma4", None, TEMPLATES / "google-gemma-4-31B-it.jinja"),
    ("lfm2", None, TEMPLATES / "LFM2.5-8B-A1B.jinja"),
    ("functionary_v31", None, TEMPLATES / "meetkai-functionary-medium-v3.1.jinja"),
    ("functionary_v32", None, TEMPLATES / "meetkai-functionary-medium-v3.2.jinja"),
]


def _pieces(text: str) -> list[str]:
    """The text in 5-character pieces (names split across pieces)."""
    return [text[i:i + 5] for i in range(0, len(text), 5)]


@pytest.mark.parametrize(("parser", "reasoning", "template"), LLAMACPP_FORMATS, ids=[f[0] for f in LLAMACPP_FORMATS])
def test_llamacpp_forced_calls_round_trip_the_names(backend_factory, proxy_factory, parser: str,
                                                    reasoning: str | None, template: Path) -> None:
    """``required``, then a named choice, on llama.cpp: the grammar sent upstream accepts the
    format's own spelling of the calls and no other name; the model's text comes back as the same
    names, streamed and not."""
    backend = backend_factory("llamacpp", chat_template=template.read_text())
    proxy = proxy_factory(backend=backend.url, tool_call_parser=parser, reasoning_parser=reasoning)
    wire = tool_detector_class(parser).wire
    assert wire is not None
    client = client_for(proxy)
    for choice, calls in (("required", CALLS), ({"type": "function", "function": {"name": SLASHED}}, CALLS[1:])):
        text = wire.render(calls)
        backend.script(Script(pieces=_pieces(text)), Script(pieces=_pieces(text)))
        whole = client.chat.completions.create(model="m", messages=ASK, tools=CHAT_TOOLS, tool_choice=choice)
        body = backend.bodies()[-1]
        grammar = body["grammar"]
        assert accepts(grammar, text), (parser, choice, grammar)
        for wrong in ("weather-get", "weatherXget", "user-profile.update"):  # a '.' is no wildcard, a '/' no '.'
            assert not accepts(grammar, text.replace(calls[0][0], wrong, 1)), (parser, wrong)
        assert all(name in body["prompt"] for name, _ in calls), "the tools are offered under their names"
        with client.chat.completions.stream(model="m", messages=ASK, tools=CHAT_TOOLS, tool_choice=choice) as stream:
            streamed = stream.get_final_completion()
        assert _calls(whole.choices[0].message) == _calls(streamed.choices[0].message) == calls, (parser, text)


def test_messages_named_tool_on_llamacpp(backend_factory, proxy_factory) -> None:
    backend = backend_factory("llamacpp", chat_template=QWEN3_TEMPLATE.read_text())
    proxy = proxy_factory(backend=backend.url, tool_call_parser="qwen25", reasoning_parser="qwen3")
    call = '<tool_call>\n{"name": "weather.get", "arguments": {"city": "Paris"}}\n</tool_call>'
    backend.script(Script(pieces=_pieces(call)))
    client = anthropic.Anthropic(base_url=proxy.url, api_key="unused", max_retries=0, timeout=30)
    message = client.messages.create(model="m", max_tokens=100, messages=ASK, tools=MESSAGES_TOOLS,
                                     tool_choice={"type": "tool", "name": DOTTED})
    grammar = backend.bodies()[-1]["grammar"]
    assert accepts(grammar, call) and not accepts(grammar, call.replace(DOTTED, "weather_get"))
    assert [(b.name, b.input) for b in message.content if b.type == "tool_use"] == [CALLS[0]]


# ------------------------------------------------------------------ learned formats


def test_learned_formats_round_trip_every_accepted_name() -> None:
    """``auto`` builds a generic detector for templates no registered format matches; the names it
    reads are the template's NAME slot, so every accepted name comes back (registered formats:
    ``tests/test_wire_roundtrip.py``)."""
    learned = [r.tools.parser for r in map(analyse_template_file, sorted(TEMPLATES.glob("*.jinja")))
               if r.tools.kind == "generic"]
    assert learned, "the template corpus has templates with learned formats"
    for detector in learned:
        assert isinstance(detector, type) and detector.wire is not None
        markers = tuple(m for m in detector.markers if m.strip())
        for name in EDGE_NAMES:
            specs = [{"type": "function", "function": {"name": name, "parameters": PARAMS[DOTTED]}}]
            calls = [(name, {"city": "Paris"}), (name, {})]
            make = functools.partial(build_response_parser, specs, detector, None)
            whole, streams = run_all_chunkings(make, detector.wire.render(calls), markers)
            assert [(c.name, json.loads(c.arguments)) for c in whole.calls] == calls, (detector, name)
            assert all(comparable(fold(events)) == comparable(whole) for events in streams.values()), (detector, name)


# ------------------------------------------------------------------ the builders escape what they are given


def test_grammar_and_structural_tag_escape_any_name() -> None:
    """Names reach the builders already checked, but the builders do not rely on it: a name with a
    quote, a backslash, a newline and a GBNF operator is a literal in the grammar and JSON in the tag."""
    hostile = 'a"b\\c\nd | e ::= f'
    specs = to_specs([{"type": "function", "function": {"name": hostile, "parameters": {"type": "object"}}}])
    wire = tool_detector_class("qwen25").wire
    assert wire is not None
    grammar = calls_grammar(wire, specs, None)
    written = wire.split_call(hostile)[0] + "{}" + wire.split_call(hostile)[1]
    assert accepts(grammar, written)
    assert not accepts(grammar, written.replace("a", "x", 1))
    tag = structural_tag(wire, specs)
    assert json.loads(json.dumps(tag))["structures"][0]["begin"].endswith(f'"name": "{hostile}", "arguments": ')
