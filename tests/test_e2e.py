"""End-to-end tier: a real llama-server (built from llama.cpp's source, cached) on a real GGUF model
(SmolLM2-135M-Instruct from PyPI), started through the managed-backend code, with the proxy in
front and the ``openai`` SDK as client."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

from app.backends import GenerationRequest, LlamaCppBackend, Sampling, TextDelta
from app.local.artifacts import ensure_llama_server
from app.local.llama_server import LlamaServerProcess
from tests.conftest import client_for
from tests.proxy_server import ProxyServer, free_port

pytestmark = pytest.mark.e2e

GREETING = [{"role": "user", "content": "Say hello to Ada in one short sentence."}]


@pytest.fixture(scope="module")
def proxy(llama: LlamaServerProcess) -> Iterator[ProxyServer]:
    server = ProxyServer(backend=llama.url).start()
    yield server
    server.stop()


def test_backend_is_detected_with_its_own_template(proxy: ProxyServer) -> None:
    health = httpx.get(proxy.url + "/health", timeout=30).json()
    assert health["status"] == "ok" and health["backend_type"] == "llamacpp"
    assert health["template"] == "backend /props"
    assert "<|im_start|>" in proxy.runtime.model.template.source


def test_non_streaming_chat(proxy: ProxyServer) -> None:
    result = client_for(proxy).chat.completions.create(model="smollm2", messages=GREETING, max_tokens=24,
                                                       temperature=0, seed=1)
    choice = result.choices[0]
    assert choice.message.role == "assistant"
    assert choice.message.content and choice.message.content.strip()
    assert "<|im_end|>" not in choice.message.content
    assert choice.finish_reason in ("stop", "length")
    assert 0 < result.usage.completion_tokens <= 24


def test_streaming_chat_matches_non_streaming(proxy: ProxyServer) -> None:
    client = client_for(proxy)
    kwargs = {"model": "smollm2", "messages": GREETING, "max_tokens": 24, "temperature": 0, "seed": 1}
    whole = client.chat.completions.create(**kwargs).choices[0].message.content
    chunks = list(client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kwargs))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens > 0
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]


def test_logprobs_one_per_content_token_streaming_equals_non_streaming(proxy: ProxyServer) -> None:
    client = client_for(proxy)
    kwargs = {"model": "smollm2", "messages": GREETING, "max_tokens": 6, "temperature": 0, "seed": 1,
              "logprobs": True, "top_logprobs": 2}
    whole = client.chat.completions.create(**kwargs)
    choice = whole.choices[0]
    entries = choice.logprobs.content
    assert choice.finish_reason == "length" and len(entries) == whole.usage.completion_tokens == 6
    assert "".join(e.token for e in entries) == choice.message.content
    for entry in entries:
        assert entry.logprob <= 0 and bytes(entry.bytes).decode() == entry.token
        assert len(entry.top_logprobs) == 2 and entry.top_logprobs[0].logprob >= entry.top_logprobs[1].logprob
        assert entry.logprob <= entry.top_logprobs[0].logprob + 1e-6
    chunks = list(client.chat.completions.create(stream=True, **kwargs))
    streamed = [e for c in chunks if c.choices and c.choices[0].logprobs for e in c.choices[0].logprobs.content]
    assert [e.token for e in streamed] == [e.token for e in entries]
    assert [e.logprob for e in streamed] == pytest.approx([e.logprob for e in entries], abs=1e-3)


def test_n_fans_out_on_llama_server(proxy: ProxyServer) -> None:
    result = client_for(proxy).chat.completions.create(model="smollm2", messages=GREETING, max_tokens=4,
                                                       temperature=0, n=2)
    assert [c.index for c in result.choices] == [0, 1]
    assert result.choices[0].message.content == result.choices[1].message.content  # temperature 0
    assert result.usage.completion_tokens == 8


def test_max_tokens_gives_length(proxy: ProxyServer) -> None:
    result = client_for(proxy).chat.completions.create(
        model="smollm2", messages=[{"role": "user", "content": "Write a long story about the sea."}],
        max_tokens=5, temperature=0)
    assert result.choices[0].finish_reason == "length"
    assert result.usage.completion_tokens == 5


def test_stop_strings(proxy: ProxyServer) -> None:
    client = client_for(proxy)
    messages = [{"role": "user", "content": "Count from 1 to 10, separated by commas."}]
    free = client.chat.completions.create(model="smollm2", messages=messages, max_tokens=40, temperature=0)
    text = free.choices[0].message.content
    assert "3" in text, text
    stopped = client.chat.completions.create(model="smollm2", messages=messages, max_tokens=40, temperature=0,
                                             stop=["3"])
    assert stopped.choices[0].finish_reason == "stop"
    assert "3" not in stopped.choices[0].message.content
    assert text.startswith(stopped.choices[0].message.content)


def test_usage_matches_llama_server(proxy: ProxyServer, llama: LlamaServerProcess) -> None:
    result = client_for(proxy).chat.completions.create(model="smollm2", messages=GREETING, max_tokens=8,
                                                       temperature=0)
    prompt = proxy.runtime.model.template.render(GREETING)
    tokens = httpx.post(llama.url + "/tokenize", json={"content": prompt, "add_special": True}, timeout=30).json()
    assert result.usage.prompt_tokens == len(tokens["tokens"])
    assert result.usage.total_tokens == result.usage.prompt_tokens + result.usage.completion_tokens


def test_an_agent_sized_max_tokens_is_fitted_to_the_context(proxy: ProxyServer, llama: LlamaServerProcess) -> None:
    """opencode and Claude Code ask for 32000 tokens; this llama-server holds far fewer. toolwire
    lowers the request to what fits after the prompt (counted by llama-server's tokenizer), says so
    in a header, and the agent gets its answer."""
    context = httpx.get(llama.url + "/props", timeout=30).json()["default_generation_settings"]["n_ctx"]
    prompt = proxy.runtime.model.template.render(GREETING)
    tokens = len(httpx.post(llama.url + "/tokenize", json={"content": prompt, "add_special": True,
                                                           "parse_special": True}, timeout=30).json()["tokens"])
    expected = f"clamped from 32000 to {context - tokens} (context {context}, prompt {tokens} tokens)"
    raw = client_for(proxy).chat.completions.with_raw_response.create(model="smollm2", messages=GREETING,
                                                                      max_tokens=32000, temperature=0, seed=1)
    result = raw.parse()
    assert result.choices[0].message.content and result.usage.prompt_tokens == tokens
    assert raw.headers["x-toolwire-max-tokens"] == expected
    claude = anthropic.Anthropic(base_url=proxy.url, api_key="unused", max_retries=0, timeout=120)
    message = claude.messages.with_raw_response.create(model="smollm2", max_tokens=32000, messages=GREETING)
    assert message.parse().content
    assert message.headers["x-toolwire-max-tokens"].startswith("clamped from 32000 to ")
    assert f"(context {context}, prompt " in message.headers["x-toolwire-max-tokens"]


def test_preserved_tokens_reach_the_parser(llama: LlamaServerProcess) -> None:
    """A special token (``<file_sep>`` in SmolLM2's vocabulary), forced by a token-level grammar,
    arrives as text only when it is listed in ``preserved_tokens`` — which our backend client sets
    from the active detectors' markers."""

    async def generate(preserved: tuple[str, ...]) -> str:
        async with httpx.AsyncClient(timeout=60) as client:
            backend = LlamaCppBackend(llama.url, client)
            request = GenerationRequest("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
                                        Sampling(max_tokens=4, temperature=0), preserved,
                                        {"grammar": "root ::= <file_sep> [a-z]+"})
            return "".join([item.text async for item in backend.generate(request) if isinstance(item, TextDelta)])

    assert asyncio.run(generate(("<file_sep>",))).startswith("<file_sep>")
    assert not asyncio.run(generate(())).startswith("<")


def _wait_health(url: str, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise TimeoutError(url)


def _llama_children(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True, check=False).stdout
    return [int(p) for p in out.split()]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    state = Path(f"/proc/{pid}/stat").read_text().split()[2] if Path(f"/proc/{pid}/stat").exists() else "X"
    return state not in ("Z", "X")


@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
def test_serve_local_model_leaves_no_orphans(how: str) -> None:
    """``toolwire serve --local-model`` owns its llama-server: it stops with the proxy, even when
    the proxy is killed outright."""
    ensure_llama_server()
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "app.cli", "serve", "--local-model", "embedded", "--port",
                             str(port), "--local-ctx", "1024", "--local-threads", "1"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_health(f"http://127.0.0.1:{port}")
        children = _llama_children(proc.pid)
        assert children, "llama-server child not found"
        proc.send_signal(getattr(signal, how))
        proc.wait(30)
        deadline = time.monotonic() + 15
        while any(_alive(c) for c in children) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not any(_alive(c) for c in children), "llama-server outlived toolwire"
    finally:
        if proc.poll() is None:
            proc.kill()


# ---------------------------------------------------------------------- constrained decoding

WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather forecast for a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "enum": ["Paris", "Tokyo", "Lima"]},
        "days": {"type": "integer"}},
        "required": ["city", "days"]}}}


@pytest.fixture(scope="module")
def tool_proxy(llama: LlamaServerProcess) -> Iterator[ProxyServer]:
    server = ProxyServer(backend=llama.url, tool_call_parser="hermes").start()
    yield server
    server.stop()


@pytest.mark.parametrize("stream", [False, True])
def test_required_tool_call_from_the_real_model_validates(tool_proxy: ProxyServer, stream: bool) -> None:
    import jsonschema

    client = client_for(tool_proxy)
    kwargs = {"model": "smollm2", "messages": [{"role": "user", "content": "What is the weather in Paris for 3 days?"}],
                  "tools": [WEATHER_TOOL], "tool_choice": "required", "max_tokens": 120, "temperature": 0,
              # one call: the grammar then ends the output (with parallel calls allowed, the tiny model
              # sometimes writes a second call and runs out of tokens, depending on its KV cache state)
              "parallel_tool_calls": False}
    if stream:
        with client.chat.completions.stream(**kwargs) as events:
            final = events.get_final_completion()
    else:
        final = client.chat.completions.create(**kwargs)
    choice = final.choices[0]
    assert choice.finish_reason == "tool_calls", choice
    assert choice.message.tool_calls, choice.message
    call = choice.message.tool_calls[0]
    assert call.function.name == "get_weather"
    jsonschema.validate(json.loads(call.function.arguments), WEATHER_TOOL["function"]["parameters"])


def _wire_names() -> list[str]:
    from parsers.registry import TOOL_PARSERS, tool_detector_class

    return sorted(n for n in TOOL_PARSERS if tool_detector_class(n).wire is not None)


@pytest.mark.parametrize("name", _wire_names())
def test_generation_under_each_wire_grammar_parses(llama: LlamaServerProcess, name: str) -> None:
    """The grammar generated for a detector's own wire format drives the real model into output
    the detector parses as one call with schema-valid arguments."""
    import jsonschema

    from app.constraints.tools import calls_grammar
    from parsers import FunctionCallParser
    from parsers.registry import tool_detector_class
    from parsers.tools import to_specs

    grammar = calls_grammar(tool_detector_class(name).wire, to_specs([WEATHER_TOOL]), 1)
    response = httpx.post(llama.url + "/completion", timeout=120, json={
        "prompt": "<|im_start|>user\nWeather in Paris for 3 days?<|im_end|>\n<|im_start|>assistant\n",
        "n_predict": 400, "grammar": grammar, "temperature": 0})
    assert response.status_code == 200, response.text
    text = response.json()["content"]
    content, calls = FunctionCallParser([WEATHER_TOOL], name).parse_non_stream(text)
    assert len(calls) == 1 and calls[0].name == "get_weather", text
    jsonschema.validate(json.loads(calls[0].parameters), WEATHER_TOOL["function"]["parameters"])
    assert not content.strip()


# ---------------------------------------------------------------------------------- agent loop

TOOL_RESULT = "RESULT-4417: sunny, 21 C"


def test_call_only_round_trip_on_the_real_model(tool_proxy: ProxyServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """An agent's round trip on the real model: a forced call (the tiny model calls reliably only
    under a grammar), the SDK's own call-only message handed back — ``"content": null`` — with the
    tool result, and the next request, streamed and not, answers with text. The prompts that reach
    llama-server are recorded as the backend client builds them: the second holds the call and then
    the tool result."""
    backend = tool_proxy.runtime.model.backend
    assert backend is not None, "the proxy did not probe llama-server at start-up"
    prompts: list[str] = []
    dialect = backend.dialect

    class Recording:  # the backend's own dialect, each request body it builds recorded
        def __getattr__(self, name: str) -> Any:
            return getattr(dialect, name)

        def body(self, request: GenerationRequest, model: str | None) -> dict:
            body = dialect.body(request, model)
            prompts.append(body["prompt"])
            return body

    monkeypatch.setattr(backend, "dialect", Recording())
    sent: list[dict] = []  # what the openai SDK put on the wire

    def record(request: httpx.Request) -> None:
        sent.append(json.loads(request.content))

    question = "What is the weather in Paris for 3 days?"
    with httpx.Client(event_hooks={"request": [record]}, timeout=120) as http:
        # a forced call is slow on two shared cores (the grammar checks the vocabulary at every token)
        client = openai.OpenAI(base_url=tool_proxy.url + "/v1", api_key="unused", max_retries=0, timeout=120,
                               http_client=http)
        messages: list = [{"role": "user", "content": question}]
        first = client.chat.completions.create(
            model="smollm2", messages=messages, tools=[WEATHER_TOOL], max_tokens=100, temperature=0,
            tool_choice={"type": "function", "function": {"name": "get_weather"}}, parallel_tool_calls=False)
        message = first.choices[0].message
        assert message.content is None and message.tool_calls and len(message.tool_calls) == 1, first
        call = message.tool_calls[0]
        assert call.function.name == "get_weather"
        arguments = json.loads(call.function.arguments)
        messages += [message, {"role": "tool", "tool_call_id": call.id, "content": TOOL_RESULT}]

        kwargs = {"model": "smollm2", "messages": messages, "tools": [WEATHER_TOOL], "max_tokens": 24,
                  "temperature": 0}
        second = client.chat.completions.create(**kwargs)
        with client.chat.completions.stream(**kwargs, stream_options={"include_usage": True}) as events:
            streamed = events.get_final_completion()

    assert len(sent) == 3 and len(prompts) == 3
    handed_back = sent[1]["messages"][1]
    assert handed_back["role"] == "assistant" and "content" in handed_back and handed_back["content"] is None
    assert handed_back["tool_calls"][0]["id"] == call.id

    for answer in (second, streamed):
        choice = answer.choices[0]
        assert choice.finish_reason in ("stop", "length"), choice
        assert choice.message.content and choice.message.content.strip(), choice
        assert "<tool_call>" not in choice.message.content and "<|im_end|>" not in choice.message.content
        assert answer.usage.prompt_tokens > first.usage.prompt_tokens  # the call and result made it longer

    assert TOOL_RESULT not in prompts[0]
    for prompt in prompts[1:]:
        after_question = prompt[prompt.index(question) + len(question):]
        assert "get_weather" in after_question and str(arguments["city"]) in after_question, prompt
        assert TOOL_RESULT in after_question, prompt
        assert after_question.index("get_weather") < after_question.index(TOOL_RESULT)
        assert prompt.endswith("<|im_start|>assistant\n")
    assert prompts[1] == prompts[2]  # streaming or not, the same prompt


# ------------------------------------------------------------------------- Anthropic Messages API


@pytest.mark.parametrize("stream", [False, True])
def test_forced_tool_use_through_the_messages_api(tool_proxy: ProxyServer, stream: bool) -> None:
    """The real model, constrained to the tool named in ``tool_choice``, answers one ``tool_use``
    block whose input validates against the tool's schema (the anthropic SDK as client)."""
    import anthropic
    import jsonschema

    client = anthropic.Anthropic(base_url=tool_proxy.url, api_key="unused", max_retries=0, timeout=120)
    schema = WEATHER_TOOL["function"]["parameters"]
    kwargs = {"model": "smollm2", "max_tokens": 120, "extra_body": {"temperature": 0},
              "messages": [{"role": "user", "content": "What is the weather in Paris for 3 days?"}],
              "tools": [{"name": "get_weather", "description": "Weather forecast for a city", "input_schema": schema}],
              "tool_choice": {"type": "tool", "name": "get_weather"}}
    if stream:
        with client.messages.stream(**kwargs) as events:
            message = events.get_final_message()
    else:
        message = client.messages.create(**kwargs)
    assert message.stop_reason == "tool_use", message
    calls = [b for b in message.content if b.type == "tool_use"]
    assert len(calls) == 1 and calls[0].name == "get_weather" and calls[0].id.startswith("toolu_")
    jsonschema.validate(calls[0].input, schema)
    assert message.usage.input_tokens > 0 and message.usage.output_tokens > 0


# -------------------------------------------------------------------------------- Responses API


@pytest.mark.parametrize("stream", [False, True])
def test_forced_tool_call_through_the_responses_api(tool_proxy: ProxyServer, stream: bool) -> None:
    """The real model, constrained to the tool named in ``tool_choice``, answers one ``function_call``
    item whose arguments validate against the tool's schema (the openai SDK's Responses client)."""
    import jsonschema

    client = client_for(tool_proxy)
    schema = WEATHER_TOOL["function"]["parameters"]
    kwargs = {"model": "smollm2", "max_output_tokens": 120, "temperature": 0,
              "input": "What is the weather in Paris for 3 days?",
              "tools": [{"type": "function", "name": "get_weather", "description": "Weather forecast for a city",
                         "parameters": schema}],
              "tool_choice": {"type": "function", "name": "get_weather"}}
    if stream:
        with client.responses.stream(**kwargs) as events:
            response = events.get_final_response()
    else:
        response = client.responses.create(**kwargs)
    assert response.status == "completed", response
    calls = [o for o in response.output if o.type == "function_call"]
    assert len(calls) == 1 and calls[0].name == "get_weather"
    jsonschema.validate(json.loads(calls[0].arguments), schema)
    assert response.usage is not None and response.usage.input_tokens > 0 and response.usage.output_tokens > 0
