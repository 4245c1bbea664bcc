"""The proxy over HTTP, with the official ``openai`` SDK as client, in front of scripted backends
that speak vLLM's, llama-server's and generic OpenAI completions streaming formats."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import httpx
import openai
import pytest

from app.settings import Settings
from app.templates.chat_template import ChatTemplate
from tests.conftest import QWEN3_TEMPLATE, client_for, sse_events
from tests.scripted_backend import Gate, Script

TOOLS: list[dict[str, Any]] = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
                                      "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                     "required": ["city"]}}},
    {"type": "function", "function": {"name": "search", "parameters": {
        "type": "object", "properties": {"query": {"type": "string"}}}}},
]
MESSAGES = [{"role": "user", "content": "Weather in Paris?"}]

REASONING_AND_CALL = [
    "<think>", "\nThe user", " wants weather.", "\n</think>", "\n\n", "<tool_call>", "\n{\"name\": \"get_",
    "weather\", \"arguments\": {\"city\"", ": \"Par", "is\"}}", "\n</tool_call>",
]
TWO_CALLS = [
    "Checking both.\n", "<tool_call>", '\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n', "</tool_call>",
    "\n", "<tool_call>", '\n{"name": "search", "arguments": {"query": "café"}}\n', "</tool_call>",
]


def test_plain_content_non_streaming(qwen3_vllm) -> None:
    backend, proxy = qwen3_vllm
    backend.script(Script(pieces=["Hello", " there", "!"], prompt_tokens=12))
    result = client_for(proxy).chat.completions.create(model="x", messages=MESSAGES)
    choice = result.choices[0]
    assert choice.message.content == "Hello there!"
    assert choice.message.tool_calls is None
    assert choice.finish_reason == "stop"
    assert result.usage is not None and (result.usage.prompt_tokens, result.usage.completion_tokens) == (12, 3)
    assert result.model == "Qwen/Qwen3-8B"


def test_backend_request_body_for_vllm(qwen3_vllm) -> None:
    backend, proxy = qwen3_vllm
    client_for(proxy).chat.completions.create(
        model="x", messages=MESSAGES, tools=TOOLS, max_tokens=50, temperature=0.2, top_p=0.9, stop=["END"], seed=7,
        presence_penalty=0.5, frequency_penalty=0.25)
    body = backend.bodies()[-1]
    expected_prompt = ChatTemplate.load(QWEN3_TEMPLATE).render(MESSAGES, TOOLS)
    assert body["prompt"] == expected_prompt
    assert body["model"] == "Qwen/Qwen3-8B"
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    assert body["skip_special_tokens"] is False and body["spaces_between_special_tokens"] is False
    assert body["add_special_tokens"] is False
    assert (body["max_tokens"], body["temperature"], body["top_p"], body["stop"], body["seed"]) == \
        (50, 0.2, 0.9, ["END"], 7)
    assert (body["presence_penalty"], body["frequency_penalty"]) == (0.5, 0.25)


def test_reasoning_and_incremental_tool_call_chunks(qwen3_vllm) -> None:
    backend, proxy = qwen3_vllm
    backend.script(Script(pieces=REASONING_AND_CALL, delay=0.005))  # pieces arrive one by one
    response = httpx.post(proxy.url + "/v1/chat/completions", timeout=30, json={
        "model": "x", "messages": MESSAGES, "tools": TOOLS, "stream": True,
        "stream_options": {"include_usage": True}})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    events = sse_events(response)
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": None}
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert len({c["id"] for c in chunks}) == 1
    assert all(c["usage"] is None for c in chunks[:-1])
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == len(REASONING_AND_CALL)
    deltas = [c["choices"][0]["delta"] for c in chunks[1:-2]]
    reasoning = "".join(d.get("reasoning_content", "") for d in deltas)
    assert reasoning == "The user wants weather."
    assert not any(d.get("content") for d in deltas)
    calls = [d["tool_calls"][0] for d in deltas if "tool_calls" in d]
    header = calls[0]
    assert header["index"] == 0 and header["type"] == "function" and header["id"].startswith("call_")
    assert header["function"] == {"name": "get_weather", "arguments": ""}
    fragments = [c["function"]["arguments"] for c in calls[1:]]
    assert all(set(c) == {"index", "function"} and c["index"] == 0 for c in calls[1:])
    assert len(fragments) >= 2, "arguments must stream in several fragments"
    assert json.loads("".join(fragments)) == {"city": "Paris"}
    final = chunks[-2]["choices"][0]
    assert final["delta"] == {} and final["finish_reason"] == "tool_calls"


def test_role_chunk_arrives_with_the_first_token_even_when_the_parser_holds_it(qwen3_vllm) -> None:
    """The first token is a tool-call marker (nothing to show yet) and the backend then pauses — here
    until the client has its first chunk: the client still gets the response head and the role chunk,
    not after the pause (it would wait for ever otherwise)."""
    backend, proxy = qwen3_vllm
    paused = Gate()
    backend.script(Script(pieces=["<tool_call>", '\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n',
                                  "</tool_call>"], hold=paused, hold_after=1))
    stream = client_for(proxy).chat.completions.create(model="x", messages=MESSAGES, tools=TOOLS, stream=True)
    first = next(iter(stream))
    paused.open()
    assert first.choices[0].delta.role == "assistant" and not first.choices[0].delta.tool_calls
    rest = list(stream)
    assert rest[-1].choices[0].finish_reason == "tool_calls"


def test_two_parallel_calls_with_the_sdk(qwen3_vllm) -> None:
    backend, proxy = qwen3_vllm
    backend.script(Script(pieces=TWO_CALLS))
    stream = client_for(proxy).chat.completions.create(model="x", messages=MESSAGES, tools=TOOLS, stream=True)
    content, calls, finish = "", {}, None
    for chunk in stream:
        delta = chunk.choices[0].delta
        content += delta.content or ""
        for call in delta.tool_calls or []:
            entry = calls.setdefault(call.index, {"id": None, "name": "", "arguments": ""})
            entry["id"] = entry["id"] or call.id
            entry["name"] += (call.function.name or "") if call.function else ""
            entry["arguments"] += (call.function.arguments or "") if call.function else ""
        finish = chunk.choices[0].finish_reason or finish
    assert content == "Checking both."
    assert [calls[i]["name"] for i in sorted(calls)] == ["get_weather", "search"]
    assert json.loads(calls[1]["arguments"]) == {"query": "café"}
    assert calls[0]["id"] != calls[1]["id"]
    assert finish == "tool_calls"


def test_sdk_stream_helper_accumulates(qwen3_vllm) -> None:
    backend, proxy = qwen3_vllm
    backend.script(Script(pieces=REASONING_AND_CALL))
    with client_for(proxy).chat.completions.stream(model="x", messages=MESSAGES, tools=TOOLS) as stream:
        for _ in stream:
            pass
        final = stream.get_final_completion()
    message = final.choices[0].message
    assert message.tool_calls and message.tool_calls[0].function.name == "get_weather"
    assert json.loads(message.tool_calls[0].function.arguments) == {"city": "Paris"}
    assert final.choices[0].finish_reason == "tool_calls"


def test_text_before_call_non_streaming(qwen3_vllm) -> None:
    backend, proxy = qwen3_vllm
    backend.script(Script(pieces=TWO_CALLS[:4]))
    result = client_for(proxy).chat.completions.create(model="x", messages=MESSAGES, tools=TOOLS)
    message = result.choices[0].message
    assert message.content == "Checking both."
    assert message.tool_calls is not None and len(message.tool_calls) == 1
    assert message.tool_calls[0].id.startswith("call_")
    assert result.choices[0].finish_reason == "tool_calls"


def test_streaming_and_non_streaming_agree(qwen3_vllm) -> None:
    backend, proxy = qwen3_vllm
    client = client_for(proxy)
    backend.script(Script(pieces=REASONING_AND_CALL), Script(pieces=REASONING_AND_CALL))
    whole = client.chat.completions.create(model="x", messages=MESSAGES, tools=TOOLS).choices[0].message
    with client.chat.completions.stream(model="x", messages=MESSAGES, tools=TOOLS) as stream:
        streamed = stream.get_final_completion().choices[0].message
    assert whole.content == streamed.content
    assert whole.reasoning_content == "The user wants weather."
    assert [(c.function.name, json.loads(c.function.arguments)) for c in whole.tool_calls] == \
        [(c.function.name, json.loads(c.function.arguments)) for c in streamed.tool_calls]


def test_tool_choice_none_renders_no_tools_and_parses_no_calls(qwen3_vllm) -> None:
    backend, proxy = qwen3_vllm
    backend.script(Script(pieces=TWO_CALLS[:4]))
    result = client_for(proxy).chat.completions.create(model="x", messages=MESSAGES, tools=TOOLS, tool_choice="none")
    assert "get_weather" not in backend.bodies()[-1]["prompt"]
    message = result.choices[0].message
    assert message.tool_calls is None
    assert "<tool_call>" in message.content
    assert result.choices[0].finish_reason == "stop"


def test_length_finish_is_reported(qwen3_vllm) -> None:
    backend, proxy = qwen3_vllm
    backend.script(Script(pieces=["a", "b"], finish="length"))
    result = client_for(proxy).chat.completions.create(model="x", messages=MESSAGES, max_tokens=2)
    assert result.choices[0].finish_reason == "length"
    assert result.choices[0].message.content == "ab"


def test_truncated_call_is_never_presented_as_finished(qwen3_vllm) -> None:
    backend, proxy = qwen3_vllm
    cut = ["I will check.\n", "<tool_call>", '\n{"name": "get_weather", "arguments": {"city": "Pa']
    backend.script(Script(pieces=cut, finish="length"), Script(pieces=cut, finish="length"))
    client = client_for(proxy)
    whole = client.chat.completions.create(model="x", messages=MESSAGES, tools=TOOLS)
    assert whole.choices[0].message.tool_calls is None
    assert whole.choices[0].finish_reason == "length"
    chunks = list(client.chat.completions.create(model="x", messages=MESSAGES, tools=TOOLS, stream=True))
    assert chunks[-1].choices[0].finish_reason == "length"


def test_reasoning_field_both(backend_factory, proxy_factory) -> None:
    backend = backend_factory("vllm")
    proxy = proxy_factory(backend=backend.url, chat_template=str(QWEN3_TEMPLATE), reasoning_parser="qwen3",
                          reasoning_field="both")
    backend.script(Script(pieces=["<think>", "hm", "</think>", "ok"]))
    raw = httpx.post(proxy.url + "/v1/chat/completions", json={"messages": MESSAGES}, timeout=30).json()
    message = raw["choices"][0]["message"]
    assert message["reasoning_content"] == "hm" and message["reasoning"] == "hm" and message["content"] == "ok"


def test_llamacpp_backend(backend_factory, proxy_factory) -> None:
    template = QWEN3_TEMPLATE.read_text()
    backend = backend_factory("llamacpp", chat_template=template, bos_token="", eos_token="<|im_end|>")
    proxy = proxy_factory(backend=backend.url, reasoning_parser="qwen3", tool_call_parser="qwen25")
    assert proxy.runtime.model is None or proxy.runtime.model.backend.kind == "llamacpp"
    backend.script(Script(pieces=REASONING_AND_CALL), Script(pieces=["x", "y"], finish="length"))
    client = client_for(proxy)
    result = client.chat.completions.create(model="x", messages=MESSAGES, tools=TOOLS, max_tokens=64)
    assert result.choices[0].message.tool_calls[0].function.name == "get_weather"
    body = backend.bodies()[-1]
    assert body["prompt"] == ChatTemplate(template).render(MESSAGES, TOOLS)
    assert body["n_predict"] == 64 and body["stream"] is True
    assert {"<think>", "</think>", "<tool_call>", "</tool_call>"} <= set(body["preserved_tokens"])
    assert "skip_special_tokens" not in body
    second = client.chat.completions.create(model="x", messages=MESSAGES)
    assert second.choices[0].finish_reason == "length" and second.usage.completion_tokens == 2


def test_llamacpp_bos_not_doubled(backend_factory, proxy_factory) -> None:
    template = "{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}<assistant>"
    backend = backend_factory("llamacpp", chat_template=template, bos_token="<s>", adds_bos=True)
    proxy = proxy_factory(backend=backend.url)
    client_for(proxy).chat.completions.create(model="x", messages=MESSAGES)
    assert backend.bodies()[-1]["prompt"] == "<user>Weather in Paris?<assistant>"


def test_generic_openai_backend(backend_factory, proxy_factory) -> None:
    backend = backend_factory("openai", model="some-model")
    proxy = proxy_factory(backend=backend.url, chat_template=str(QWEN3_TEMPLATE), tool_call_parser="hermes")
    backend.script(Script(pieces=TWO_CALLS))
    result = client_for(proxy).chat.completions.create(model="x", messages=MESSAGES, tools=TOOLS)
    assert len(result.choices[0].message.tool_calls) == 2
    body = backend.bodies()[-1]
    assert "skip_special_tokens" not in body and "add_special_tokens" not in body
    assert body["model"] == "some-model"
    assert proxy.runtime.model.backend.kind == "openai"


def test_models_and_health(qwen3_vllm) -> None:
    _, proxy = qwen3_vllm
    models = client_for(proxy).models.list()
    assert [m.id for m in models.data] == ["Qwen/Qwen3-8B"]
    health = httpx.get(proxy.url + "/health").json()
    assert health["status"] == "ok" and health["tool_call_parser"] == "qwen25"


def test_health_unavailable_when_backend_down(backend_factory, proxy_factory) -> None:
    backend = backend_factory("vllm")
    proxy = proxy_factory(backend=backend.url, chat_template=str(QWEN3_TEMPLATE))
    backend.healthy = False
    assert httpx.get(proxy.url + "/health").status_code == 503


def test_completions_passthrough(qwen3_vllm) -> None:
    backend, proxy = qwen3_vllm
    backend.script(Script(pieces=["4"]))
    response = httpx.post(proxy.url + "/v1/completions", json={"prompt": "2+2=", "stream": True}, timeout=30)
    assert response.status_code == 200 and "data: [DONE]" in response.text
    assert backend.bodies()[-1]["prompt"] == "2+2=" and backend.bodies()[-1]["model"] == "Qwen/Qwen3-8B"


@pytest.mark.parametrize(("body", "needle"), [
    ({}, "messages"),
    ({"messages": []}, "messages"),
    ({"messages": [{"role": "wizard", "content": "x"}]}, "role"),
    ({"messages": [{"role": "user"}]}, "content"),
    ({"messages": [{"role": "user", "content": "x"}], "tools": [
        {"type": "function", "function": {"name": "f", "parameters": {"type": "not-a-type"}}}]}, "JSON schema"),
    ({"messages": [{"role": "user", "content": "x"}], "tool_choice": "required"}, "tool_choice"),
    ({"messages": [{"role": "user", "content": "x"}], "tools": TOOLS,
      "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "not in tools"),
    ({"messages": [{"role": "user", "content": "x"}], "temperature": "hot"}, "temperature"),
    ({"messages": [{"role": "user", "content": "x"}], "n": 9}, "at most 8 choices"),
    ({"messages": [{"role": "user", "content": "x"}], "n": 0}, "n"),
    ({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2}, "top_logprobs needs logprobs"),
    ({"messages": [{"role": "user", "content": "x"}], "logprobs": True, "top_logprobs": 21}, "top_logprobs"),
    ({"messages": [{"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "x"}}]}]},
     "not supported"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}, "not accepted"),
])
def test_bad_requests_get_openai_errors(qwen3_vllm, body: dict, needle: str) -> None:
    _, proxy = qwen3_vllm
    response = httpx.post(proxy.url + "/v1/chat/completions", json=body, timeout=30)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and needle in error["message"]


def test_bad_request_through_the_sdk(qwen3_vllm) -> None:
    _, proxy = qwen3_vllm
    with pytest.raises(openai.BadRequestError) as info:
        client_for(proxy).chat.completions.create(model="x", messages=[])
    assert "messages" in str(info.value)


def test_invalid_json_and_non_utf8(qwen3_vllm) -> None:
    _, proxy = qwen3_vllm
    for raw in (b"{not json", b"\xff\xfe{}", b""):
        response = httpx.post(proxy.url + "/v1/chat/completions", content=raw,
                              headers={"content-type": "application/json"})
        assert response.status_code == 400 and "error" in response.json()


def test_api_keys(backend_factory, proxy_factory) -> None:
    backend = backend_factory("vllm")
    proxy = proxy_factory(backend=backend.url, chat_template=str(QWEN3_TEMPLATE), api_key=["k1", "k2"])
    with pytest.raises(openai.AuthenticationError):
        client_for(proxy, api_key="wrong").chat.completions.create(model="x", messages=MESSAGES)
    assert httpx.get(proxy.url + "/v1/models").status_code == 401
    assert client_for(proxy, api_key="k2").chat.completions.create(model="x", messages=MESSAGES).choices
    assert httpx.get(proxy.url + "/health").status_code == 200


def test_unknown_parser_name_exits_with_known_names() -> None:
    result = subprocess.run([sys.executable, "-m", "app.cli", "serve", "--backend", "http://127.0.0.1:9",
                             "--tool-call-parser", "no-such-parser"], capture_output=True, text=True, timeout=60,
                            check=False)
    assert result.returncode == 2
    assert "no-such-parser" in result.stderr and "qwen25" in result.stderr and "mistral" in result.stderr


@pytest.mark.parametrize("kind", ["vllm", "openai"])
def test_a_backend_type_that_publishes_no_template_needs_one_to_start(kind: str) -> None:
    """Known at start (the kind is named, it publishes no template, none is given): one line naming
    --chat-template and exit 2, as for an unknown parser name — never a server that is "ready" and
    then answers every chat with an error."""
    result = subprocess.run([sys.executable, "-m", "app.cli", "serve", "--backend", "http://127.0.0.1:9",
                             "--backend-type", kind], capture_output=True, text=True, timeout=30, check=False)
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "--chat-template" in lines[0] and kind in lines[0], result.stderr
    from app.runtime import validate_template_source

    validate_template_source(Settings(backend_type="llamacpp"))  # llama-server publishes its template
    validate_template_source(Settings(backend_type=kind, chat_template=QWEN3_TEMPLATE))


def test_a_detected_backend_without_a_template_stays_unready_and_answers_503(backend_factory, proxy_factory) -> None:
    """Learnt only after start (the kind is detected): not ready, saying why, and every chat on
    every face a 503 with the same message (never a 500)."""
    backend = backend_factory("vllm")
    proxy = proxy_factory(backend=backend.url)
    ready = httpx.get(proxy.url + "/readyz", timeout=30)
    assert ready.status_code == 503 and ready.json()["status"] == "unavailable"
    assert "--chat-template" in ready.json()["detail"] and "vllm" in ready.json()["detail"]
    health = httpx.get(proxy.url + "/health", timeout=30)
    assert health.status_code == 503 and "--chat-template" in health.json()["detail"]
    for path, body, status in [("/v1/chat/completions", {"model": "m", "messages": MESSAGES}, 503),
                               ("/v1/responses", {"model": "m", "input": "hi"}, 503),
                               # the Messages API's 503 is Anthropic's 529
                               ("/v1/messages", {"model": "m", "max_tokens": 5, "messages": MESSAGES}, 529)]:
        answer = httpx.post(proxy.url + path, json=body, timeout=30)
        assert answer.status_code == status, (path, answer.text)
        error = answer.json()["error"]
        assert "--chat-template" in error["message"], (path, error)
    assert not backend.bodies()  # nothing was generated


def test_env_vars_configure_serve(monkeypatch: pytest.MonkeyPatch) -> None:
    from app.cli import build_parser, settings_from_args

    monkeypatch.setenv("TOOLWIRE_TOOL_CALL_PARSER", "qwen25")
    monkeypatch.setenv("TOOLWIRE_API_KEY", "a,b")
    monkeypatch.setenv("TOOLWIRE_PORT", "9001")
    settings = settings_from_args(build_parser().parse_args(["serve", "--port", "9002"]))
    assert (settings.tool_call_parser, settings.api_key, settings.port) == ("qwen25", ["a", "b"], 9002)


def test_help_documents_every_flag() -> None:
    from app.settings import Settings

    result = subprocess.run([sys.executable, "-m", "app.cli", "serve", "--help"], capture_output=True, text=True,
                            timeout=60, check=False)
    assert result.returncode == 0
    for name in Settings.model_fields:
        assert "--" + name.replace("_", "-") in result.stdout
        assert "TOOLWIRE_" + name.upper() in result.stdout


@pytest.mark.parametrize("kind", ["vllm", "llamacpp"])
def test_reasoning_tokens_are_counted_in_usage(kind: str, backend_factory, proxy_factory) -> None:
    backend = backend_factory(kind, model="Qwen/Qwen3-8B")
    proxy = proxy_factory(backend=backend.url, chat_template=str(QWEN3_TEMPLATE), reasoning_parser="qwen3")
    pieces = ["<think>", "Let", " me", " think", "</think>", "\n\n", "Hi", "!"]  # one token a piece, apart
    client = client_for(proxy)
    backend.script(Script(pieces=pieces, delay=0.05))
    whole = client.chat.completions.create(model="x", messages=MESSAGES)
    backend.script(Script(pieces=pieces, delay=0.05))
    stream = client.chat.completions.create(model="x", messages=MESSAGES, stream=True,
                                            stream_options={"include_usage": True})
    streamed = next(c.usage for c in stream if c.usage is not None)
    for usage in (whole.usage, streamed):
        assert usage is not None and usage.completion_tokens == len(pieces)
        # "<think>" and the three words; "</think>" and the newlines go with the answer
        assert usage.completion_tokens_details is not None
        assert usage.completion_tokens_details.reasoning_tokens == 4
