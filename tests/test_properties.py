"""Property-based tests (hypothesis): random request bodies at the app, random model outputs at
every detector. Nothing escapes as an exception, and the output is always a valid OpenAI object."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from parsers import build_response_parser, fold
from parsers.registry import REASONING_PARSERS, TOOL_PARSERS, reasoning_detector_class, tool_detector_class
from tests.conftest import QWEN3_TEMPLATE
from tests.harness import check_stream_invariants, comparable, split_random
from tests.scripted_backend import Script

# ------------------------------------------------------------------------------ model outputs

JSON_BITS = ['{', '}', '[', ']', '"', ':', ',', '\\', '\\"', '"name"', '"arguments"', '"parameters"', '{"a": 1}',
             'null', 'true', '12', '-3.5e2', ' ', '\n', '\t', 'é', '🌸', '<', '>', '/', '=', 'get_time', 'x', '(',
             ')', "'", 'call:', '<|"|>', '>>>', ';', '```json']


def fragments(markers: tuple[str, ...]) -> st.SearchStrategy[str]:
    pieces = list(markers) + JSON_BITS
    return st.lists(st.one_of(st.sampled_from(pieces), st.text(max_size=6)), max_size=40).map("".join)


TOOLS = [{"type": "function", "function": {"name": n, "parameters": {"type": "object", "properties": {
    "a": {"type": "integer"}, "s": {"type": "string"}}}}} for n in ("get_time", "x", "f")]


@pytest.mark.parametrize("name", sorted(TOOL_PARSERS))
def test_random_outputs_never_break_a_tool_detector(name: str) -> None:
    detector = tool_detector_class(name)
    markers = tuple(detector.markers) + tuple(detector.start_markers)

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(text=fragments(markers), seed=st.integers(0, 1000), truncated=st.booleans())
    def check(text: str, seed: int, truncated: bool) -> None:
        runs = []
        for chunks in ([text], list(text), split_random(text, seed)):
            parser = build_response_parser(TOOLS, name, None)
            events = []
            for chunk in chunks:
                events += parser.feed(chunk)
            events += parser.end(truncated)
            assert not parser.failed, f"{name} raised on {text!r}"
            problems = [p for p in check_stream_invariants(events, ()) if "leaked" not in p]
            assert not problems, (problems, text)
            runs.append(comparable(fold(events)))
        assert runs[0] == runs[1] == runs[2], text
        for call_name, arguments, _ in runs[0]["calls"]:
            assert isinstance(json.loads(arguments), dict) and call_name

    check()


@pytest.mark.parametrize("name", sorted(REASONING_PARSERS))
def test_random_outputs_never_break_a_reasoning_detector(name: str) -> None:
    markers = tuple(reasoning_detector_class(name).markers())

    @settings(max_examples=40, deadline=None)
    @given(text=fragments(markers), seed=st.integers(0, 1000))
    def check(text: str, seed: int) -> None:
        runs = []
        for chunks in ([text], list(text), split_random(text, seed)):
            parser = build_response_parser(None, None, name)
            events = []
            for chunk in chunks:
                events += parser.feed(chunk)
            events += parser.end()
            assert not parser.failed
            runs.append(comparable(fold(events)))
        assert runs[0] == runs[1] == runs[2], text

    check()


# ------------------------------------------------------------------------------ request bodies

VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-10**12, 10**12), st.floats(allow_nan=False),
              st.text(max_size=20)),
    lambda children: st.one_of(st.lists(children, max_size=4),
                               st.dictionaries(st.text(max_size=10), children, max_size=4)),
    max_leaves=12,
)
KEYS = st.sampled_from(["messages", "tools", "tool_choice", "stream", "max_tokens", "temperature", "stop", "n",
                        "response_format", "parallel_tool_calls", "stream_options", "top_p", "seed", "model",
                        "chat_template_kwargs", "hold_tool_calls", "reasoning_effort", "junk"])
MESSAGE = st.fixed_dictionaries({"role": st.sampled_from(["user", "system", "assistant", "tool", "wizard", 3]),
                                 "content": st.one_of(st.text(max_size=30), VALUES)})
BODIES = st.one_of(
    VALUES,
    st.dictionaries(KEYS, VALUES, max_size=6),
    st.fixed_dictionaries({"messages": st.lists(MESSAGE, max_size=3)},
                          optional={"tools": st.lists(VALUES, max_size=2), "tool_choice": VALUES,
                                    "stream": st.booleans(), "max_tokens": VALUES}),
)


@pytest.fixture(scope="module")
def app_url() -> Any:
    from tests.proxy_server import ProxyServer
    from tests.scripted_backend import ScriptedBackend

    backend = ScriptedBackend("vllm").start()
    backend.default = Script(pieces=['<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>'])
    proxy = ProxyServer(backend=backend.url, chat_template=str(QWEN3_TEMPLATE), tool_call_parser="qwen25").start()
    yield proxy.url
    proxy.stop()
    backend.stop()


def test_random_request_bodies_get_openai_answers(app_url: str) -> None:
    client = httpx.Client(timeout=30)

    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(body=BODIES)
    def check(body: Any) -> None:
        response = client.post(app_url + "/v1/chat/completions", content=json.dumps(body),
                               headers={"content-type": "application/json"})
        assert response.status_code < 500, (response.status_code, response.text, body)
        if response.status_code >= 400:
            error = response.json()["error"]
            assert isinstance(error["message"], str) and error["message"] and "Traceback" not in error["message"]
            assert error["type"] in ("invalid_request_error", "rate_limit_error")
        elif response.headers["content-type"].startswith("text/event-stream"):
            lines = [line for line in response.text.splitlines() if line.startswith("data: ")]
            assert lines[-1] == "data: [DONE]"
            for line in lines[:-1]:
                assert json.loads(line[6:])["object"] == "chat.completion.chunk"
        else:
            assert response.json()["object"] == "chat.completion"

    check()
    client.close()
