"""Short plain chat requests decoded without the request model (``app.api.chat.plain``): whatever
it takes decodes to the very ``Ask`` the full path gives (types included: ``repr`` tells ``1`` from
``1.0`` and ``True`` from ``1``), and whatever it declines is left to the full path, errors and all."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.api.chat import protocol
from app.api.chat.decode import chat_ask
from app.api.chat.parse import parse_request
from app.api.chat.plain import FIELDS, plain_ask
from app.errors import APIError
from app.settings import Settings
from tests.conftest import sse_events
from tests.proxy_server import ProxyServer
from tests.scripted_backend import Script, ScriptedBackend

SETTINGS = Settings(backend="http://127.0.0.1:9")

scalars = st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.integers(-2**70, 2**70),
                    st.floats(-3, 3, allow_nan=False), st.sampled_from(["", "hi", "5", "true", "user"]))
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=2),
                                                       st.dictionaries(st.sampled_from(["include_usage", "x", "type"]),
                                                                       inner, max_size=2)), max_leaves=4)
roles = st.sampled_from(["system", "developer", "user", "assistant", "tool", "function", "robot"])
message_keys = st.sampled_from(["role", "content", "name", "tool_calls", "tool_call_id", "reasoning_content",
                                "function_call", "extra_field"])
messages = st.lists(st.one_of(
    st.fixed_dictionaries({"role": roles, "content": st.one_of(st.text(max_size=8), values)},
                          optional={"name": st.one_of(st.text(max_size=4), values)}),
    st.dictionaries(message_keys, st.one_of(roles, values), max_size=3),
    values), min_size=0, max_size=5)
top_keys = st.sampled_from([*FIELDS, "model", "stream", "stream_options", "n", "user", "stop", "tools", "logprobs",
                            "top_logprobs", "functions", "audio", "modalities", "continue_final_message",
                            "chat_template_kwargs", "reasoning_effort", "response_format", "metadata"])
bodies = st.builds(lambda extra, msgs: {**extra, "messages": msgs}, st.dictionaries(top_keys, values, max_size=6),
                   messages)
plain_bodies = st.builds(
    lambda numbers, msgs, stream, usage: {**numbers, "messages": msgs, "model": "m", "stream": stream,
                                          **({"stream_options": {"include_usage": usage}} if usage is not None else {})},
    st.fixed_dictionaries({}, optional={name: st.one_of(st.none(), st.integers(-3, 3), *(
        [st.floats(-3, 3, allow_nan=False)] if rule[3] else [])) for name, rule in FIELDS.items()}),
    st.lists(st.fixed_dictionaries({"role": st.sampled_from(["system", "developer", "user", "assistant"]),
                                    "content": st.text(max_size=12)},
                                   optional={"name": st.text(min_size=1, max_size=4)}), min_size=1, max_size=3),
    st.booleans(), st.one_of(st.none(), st.booleans()))


def full_path(body: dict[str, Any]) -> tuple[str, bool, bool] | APIError:
    """What the request model decodes ``body`` to: the ``Ask`` (as its ``repr``), ``stream`` and
    ``include_usage`` — or the error it answers."""
    try:
        request = parse_request(body, SETTINGS)
        ask = chat_ask(request)
    except APIError as exc:
        return exc
    return repr(ask), request.stream, bool(request.stream_options and request.stream_options.include_usage)


def check(body: dict[str, Any]) -> bool:
    """The plain path, when it takes ``body``, agrees with the full path; whether it took it."""
    plain = plain_ask(body, SETTINGS)
    if plain is None:
        return False
    assert full_path(body) == (repr(plain.ask), plain.stream, plain.include_usage), body
    return True


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(bodies)
def test_whatever_the_plain_path_takes_decodes_as_the_full_path_does(body: dict[str, Any]) -> None:
    check(body)


@settings(max_examples=600, deadline=None)
@given(plain_bodies)
def test_plain_requests_in_bounds_take_the_plain_path_and_agree(body: dict[str, Any]) -> None:
    took = check(body)
    valid = not isinstance(full_path(body), APIError)
    assert took == valid, body  # each number is of its field's JSON type: the valid ones are all plain


@pytest.mark.parametrize("body", [
    {"messages": [{"role": "user", "content": "hi"}], "temperature": 1},  # the model makes it 1.0
    {"messages": [{"role": "developer", "content": "be brief"}, {"role": "user", "content": "hi"}], "stream": True,
     "stream_options": {"include_usage": True}, "max_completion_tokens": 9, "max_tokens": 3, "n": 2, "user": "u1"},
    {"messages": [{"role": "assistant", "content": "", "name": "bot"}], "model": None, "seed": 0, "top_k": -1,
     "presence_penalty": -2, "frequency_penalty": 2.0, "repetition_penalty": 1, "min_p": 0, "top_p": 1},
])
def test_typical_plain_requests_take_the_plain_path(body: dict[str, Any]) -> None:
    assert check(body)


@pytest.mark.parametrize("body", [
    {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 0},
    {"messages": [{"role": "user", "content": "hi"}], "max_tokens": "5"},
    {"messages": [{"role": "user", "content": "hi"}], "max_tokens": True},
    {"messages": [{"role": "user", "content": "hi"}], "temperature": 2.5},
    {"messages": [{"role": "user", "content": "hi"}], "repetition_penalty": 2**60},
    {"messages": [{"role": "user", "content": "hi"}], "stream": "true"},
    {"messages": [{"role": "user", "content": "hi"}], "n": 0},
    {"messages": [{"role": "user", "content": "hi"}], "stream_options": {"include_usage": 1}},
    {"messages": [{"role": "user", "content": "hi"}], "stop": "x"},
    {"messages": [{"role": "user", "content": "hi"}], "audio": {}},
    {"messages": [{"role": "user", "content": None}]},
    {"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]},
    {"messages": [{"role": "tool", "content": "1", "tool_call_id": "c"}]},
    {"messages": [{"role": ["user"], "content": "hi"}]},
    {"messages": [{"role": "user", "content": "hi", "reasoning_content": "r"}]},
    {"messages": [{"role": "user", "content": str(k)} for k in range(4)]},  # long enough for the prefix service
    {"messages": []},
    {"messages": "hi"},
])
def test_anything_else_is_left_to_the_full_path(body: dict[str, Any]) -> None:
    assert plain_ask(body, SETTINGS) is None


def test_a_list_over_the_message_limit_is_left_to_the_full_path() -> None:
    body = {"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]}
    assert plain_ask(body, Settings(backend="http://127.0.0.1:9", max_messages=1)) is None


def test_the_route_answers_a_plain_request_without_the_request_model(
        monkeypatch: pytest.MonkeyPatch, qwen3_vllm: tuple[ScriptedBackend, ProxyServer]) -> None:
    """Through HTTP: a plain request is answered, streamed or not, and the request model never
    runs; the same request with a field the plain path does not take is decoded by the model, to
    the same prompt."""
    backend, proxy = qwen3_vllm
    validated: list[Any] = []
    real = protocol.ChatCompletionRequest.model_validate

    def counting(value: Any, *args: Any, **kwargs: Any) -> Any:
        validated.append(value)
        return real(value, *args, **kwargs)

    monkeypatch.setattr(protocol.ChatCompletionRequest, "model_validate", counting)
    backend.script(*(Script(pieces=["Hello", " there."]) for _ in range(3)))
    plain = {"model": "m", "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}],
             "max_tokens": 5}
    answer = httpx.post(f"{proxy.url}/v1/chat/completions", json=plain, timeout=30)
    assert answer.status_code == 200 and answer.json()["choices"][0]["message"]["content"] == "Hello there."
    streamed = httpx.post(f"{proxy.url}/v1/chat/completions", json={**plain, "stream": True}, timeout=30)
    assert streamed.status_code == 200
    events = sse_events(streamed)
    assert events[-1] == "[DONE]"
    assert "".join(e["choices"][0]["delta"].get("content") or "" for e in events[:-1] if e["choices"]) == "Hello there."
    assert validated == []
    answer = httpx.post(f"{proxy.url}/v1/chat/completions", json={**plain, "logprobs": False}, timeout=30)
    assert answer.status_code == 200 and answer.json()["choices"][0]["message"]["content"] == "Hello there."
    assert len(validated) == 1
    prompts = [seen["prompt"] for seen in backend.bodies()]
    assert len(prompts) == 3 and prompts[0] == prompts[1] == prompts[2]
