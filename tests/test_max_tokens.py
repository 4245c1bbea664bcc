"""``max_tokens`` fitted to the backend's context (``app.pipeline.budget``, issue 25 item 3): agents
ask for 32000 tokens of a model with a small context; toolwire lowers the request to what fits after
the prompt and says so in ``X-Toolwire-Max-Tokens`` — over HTTP, with the official clients, on every
face, against scripted vLLM and llama-server backends that report and enforce their context."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import anthropic
import httpx
import openai
import pytest

from tests.conftest import QWEN3_TEMPLATE, client_for
from tests.proxy_server import ProxyServer
from tests.scripted_backend import Script, ScriptedBackend

CONTEXT = 1000
HEADER = "x-toolwire-max-tokens"
FACES = ("chat", "chat_max_completion_tokens", "chat_stream", "responses", "responses_stream", "messages",
         "messages_stream")
#: the generation request's field for max_tokens, by backend kind
LIMIT_FIELD = {"vllm": "max_tokens", "llamacpp": "n_predict"}


def ask(face: str, proxy: ProxyServer, max_tokens: int, text: str = "Write me a story.") -> httpx.Headers:
    """One request through ``face`` with the official client; the response's headers (after the
    whole answer was read)."""
    messages = [{"role": "user", "content": text}]
    if face.startswith("messages"):
        claude = anthropic.Anthropic(base_url=proxy.url, api_key="unused", max_retries=0, timeout=30)
        if face.endswith("stream"):
            with claude.messages.with_streaming_response.create(model="m", max_tokens=max_tokens, messages=messages,
                                                                stream=True) as streamed:
                assert "message_stop" in streamed.text()
                return streamed.headers
        raw = claude.messages.with_raw_response.create(model="m", max_tokens=max_tokens, messages=messages)
        assert raw.parse().content[0].text == "Hello!"
        return raw.headers
    client = client_for(proxy)
    if face.startswith("responses"):
        if face.endswith("stream"):
            with client.responses.with_streaming_response.create(model="m", input=text, max_output_tokens=max_tokens,
                                                                 stream=True) as streamed:
                assert "response.completed" in streamed.text()
                return streamed.headers
        raw_response = client.responses.with_raw_response.create(model="m", input=text, max_output_tokens=max_tokens)
        assert raw_response.parse().output_text == "Hello!"
        return raw_response.headers
    if face == "chat_stream":
        with client.chat.completions.with_streaming_response.create(model="m", messages=messages,  # type: ignore[arg-type]
                                                                    max_tokens=max_tokens, stream=True) as streamed:
            assert "[DONE]" in streamed.text()
            return streamed.headers
    limit = {"max_completion_tokens": max_tokens} if face == "chat_max_completion_tokens" else {"max_tokens": max_tokens}
    raw_chat = client.chat.completions.with_raw_response.create(model="m", messages=messages, **limit)  # type: ignore[arg-type]
    assert raw_chat.parse().choices[0].message.content == "Hello!"
    return raw_chat.headers


def counted(backend: ScriptedBackend) -> list[str]:
    """The prompts the backend's tokenizer was asked to count (the BOS probe's empty one left out)."""
    return [b.get("content", b.get("prompt", "")) for b in backend.tokenized if b.get("content", b.get("prompt"))]


@pytest.fixture(scope="module", params=["vllm", "llamacpp"])
def served(request: pytest.FixtureRequest) -> Iterator[tuple[str, ScriptedBackend, ProxyServer]]:
    """A scripted backend of each kind with a 1000-token context, behind a proxy with the default policy."""
    backend = ScriptedBackend(request.param, context=CONTEXT).start()
    proxy = ProxyServer(backend=backend.url, chat_template=str(QWEN3_TEMPLATE)).start()
    yield request.param, backend, proxy
    proxy.stop()
    backend.stop()


@pytest.mark.parametrize("face", FACES)
def test_an_agent_sized_max_tokens_is_lowered_to_what_fits_after_the_prompt(served, face: str) -> None:
    kind, backend, proxy = served
    headers = ask(face, proxy, 32000)
    prompt = counted(backend)[-1]
    prompt_tokens = len(prompt.encode())  # the scripted tokenizer: a token per byte
    granted = CONTEXT - prompt_tokens
    assert backend.bodies()[-1][LIMIT_FIELD[kind]] == granted
    assert backend.bodies()[-1]["prompt"] == prompt
    assert headers[HEADER] == f"clamped from 32000 to {granted} (context {CONTEXT}, prompt {prompt_tokens} tokens)"


@pytest.mark.parametrize("face", ["chat", "messages_stream"])
def test_a_request_that_obviously_fits_costs_no_round_trip_and_is_left_alone(served, face: str) -> None:
    kind, backend, proxy = served
    before = len(counted(backend))
    headers = ask(face, proxy, 64)
    assert len(counted(backend)) == before  # no tokenizer call
    assert backend.bodies()[-1][LIMIT_FIELD[kind]] == 64 and HEADER not in headers


def test_a_request_near_the_edge_is_counted_and_left_alone_when_it_fits(served) -> None:
    kind, backend, proxy = served
    ask("chat", proxy, 32000)
    prompt_tokens = len(counted(backend)[-1].encode())
    exact = CONTEXT - prompt_tokens  # fits exactly, but not by the byte bound plus its margin
    headers = ask("chat", proxy, exact)
    assert backend.bodies()[-1][LIMIT_FIELD[kind]] == exact and HEADER not in headers
    assert len(counted(backend)) >= 2


def test_n_answers_share_the_fitted_limit(served) -> None:
    kind, backend, proxy = served
    result = client_for(proxy).chat.completions.with_raw_response.create(
        model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=32000, n=2)
    assert len(result.parse().choices) == 2
    granted = CONTEXT - len(counted(backend)[-1].encode())
    sent = backend.bodies()[-1] if kind == "vllm" else backend.bodies()[-2]  # llama-server: a request per answer
    assert sent[LIMIT_FIELD[kind]] == granted and backend.bodies()[-1][LIMIT_FIELD[kind]] == granted
    assert result.headers[HEADER].startswith(f"clamped from 32000 to {granted} ")


def test_a_prompt_that_leaves_no_room_is_a_400_naming_the_context(served) -> None:
    _, backend, proxy = served
    sent = len(backend.bodies())
    with pytest.raises(openai.BadRequestError) as chat:
        ask("chat", proxy, 10, text="word " * 400)
    error = chat.value.body
    assert isinstance(error, dict) and error["code"] == "context_length_exceeded"
    assert f"context of {CONTEXT} tokens" in error["message"]
    with pytest.raises(anthropic.BadRequestError) as messages:
        ask("messages", proxy, 10, text="word " * 400)
    assert messages.value.body["type"] == "error"  # type: ignore[index]
    assert f"context of {CONTEXT} tokens" in messages.value.body["error"]["message"]  # type: ignore[index]
    assert len(backend.bodies()) == sent  # nothing was generated


def test_a_backend_without_a_tokenizer_endpoint_is_not_asked_per_request(
        backend_factory: Callable[..., ScriptedBackend], proxy_factory: Callable[..., ProxyServer]) -> None:
    """A backend whose ``/tokenize`` is "not found" (a gateway in front of vLLM, a build without it)
    is asked once: later requests near the edge go on as asked without a round trip each."""
    backend = backend_factory("vllm", context=CONTEXT, tokenizer=False)
    proxy = proxy_factory(backend=backend.url, chat_template=str(QWEN3_TEMPLATE))
    ask("chat", proxy, 64)  # obviously fits: no count; tells the prompt's size
    exact = CONTEXT - len(backend.bodies()[-1]["prompt"].encode())
    for face in ("chat", "chat_stream", "chat"):
        headers = ask(face, proxy, exact)
        assert backend.bodies()[-1]["max_tokens"] == exact and HEADER not in headers
    assert len(counted(backend)) == 1
    with pytest.raises(anthropic.BadRequestError, match="no tokenizer endpoint"):
        anthropic.Anthropic(base_url=proxy.url, api_key="unused", max_retries=0).messages.count_tokens(
            model="m", messages=[{"role": "user", "content": "hi"}])
    assert len(counted(backend)) == 1


# ------------------------------------------------------------------------------------------ policies

def test_policy_reject_leaves_the_context_to_the_backend(backend_factory: Callable[..., ScriptedBackend],
                                                         proxy_factory: Callable[..., ProxyServer]) -> None:
    vllm = backend_factory("vllm", context=CONTEXT)
    proxy = proxy_factory(backend=vllm.url, chat_template=str(QWEN3_TEMPLATE), max_tokens_policy="reject")
    with pytest.raises(openai.BadRequestError, match="maximum context length is 1000"):
        ask("chat", proxy, 32000)  # vLLM's own refusal, as before
    assert vllm.bodies()[-1]["max_tokens"] == 32000 and counted(vllm) == []
    llama = backend_factory("llamacpp", context=CONTEXT)
    proxy = proxy_factory(backend=llama.url, chat_template=str(QWEN3_TEMPLATE), max_tokens_policy="reject")
    assert HEADER not in ask("responses", proxy, 32000)
    assert llama.bodies()[-1]["n_predict"] == 32000


@pytest.mark.parametrize("policy", ["clamp", "reject"])
def test_the_cap_applies_first(backend_factory: Callable[..., ScriptedBackend],
                               proxy_factory: Callable[..., ProxyServer], policy: str) -> None:
    backend = backend_factory("vllm", context=CONTEXT)
    proxy = proxy_factory(backend=backend.url, chat_template=str(QWEN3_TEMPLATE), max_tokens_cap=100,
                          max_tokens_policy=policy)
    if policy == "reject":
        with pytest.raises(anthropic.BadRequestError, match="cap of 100"):
            ask("messages", proxy, 1000)
        return
    headers = ask("messages", proxy, 1000)
    assert backend.bodies()[-1]["max_tokens"] == 100
    assert headers[HEADER] == "clamped from 1000 to 100 (--max-tokens-cap 100)"
    headers = ask("chat", proxy, 32000)  # the cap, then nothing more: 100 fits
    assert backend.bodies()[-1]["max_tokens"] == 100 and "cap" in headers[HEADER]


def test_the_cap_above_the_context_is_fitted_too(backend_factory: Callable[..., ScriptedBackend],
                                                 proxy_factory: Callable[..., ProxyServer]) -> None:
    backend = backend_factory("llamacpp", context=CONTEXT)
    proxy = proxy_factory(backend=backend.url, chat_template=str(QWEN3_TEMPLATE), max_tokens_cap=5000)
    headers = ask("chat", proxy, 32000)
    granted = CONTEXT - len(counted(backend)[-1].encode())
    assert backend.bodies()[-1]["n_predict"] == granted
    assert headers[HEADER].startswith(f"clamped from 32000 to {granted} (context {CONTEXT}")
    client_for(proxy).chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    assert backend.bodies()[-1]["n_predict"] < CONTEXT  # no max_tokens: the cap, fitted


def test_the_completions_passthrough_lowers_to_the_cap(backend_factory: Callable[..., ScriptedBackend],
                                                       proxy_factory: Callable[..., ProxyServer]) -> None:
    backend = backend_factory("vllm")
    proxy = proxy_factory(backend=backend.url, max_tokens_cap=64)
    backend.script(Script(pieces=["ok"]))
    with client_for(proxy).completions.with_streaming_response.create(model="m", prompt="hi", max_tokens=5000,
                                                                      stream=True) as streamed:
        assert '"text": "ok"' in streamed.text()
    assert backend.bodies()[-1]["max_tokens"] == 64
    assert streamed.headers[HEADER] == "clamped from 5000 to 64 (--max-tokens-cap 64)"


def test_a_backend_that_does_not_tell_its_context_is_left_alone(backend_factory: Callable[..., ScriptedBackend],
                                                                proxy_factory: Callable[..., ProxyServer]) -> None:
    for kind in ("vllm", "openai"):
        backend = backend_factory(kind)
        proxy = proxy_factory(backend=backend.url, chat_template=str(QWEN3_TEMPLATE), backend_type=kind)
        assert HEADER not in ask("chat", proxy, 32000)
        assert backend.bodies()[-1]["max_tokens"] == 32000 and counted(backend) == []


def test_the_clamp_is_logged_once(served, caplog: pytest.LogCaptureFixture) -> None:
    _, _, proxy = served
    caplog.set_level("INFO", logger="toolwire")
    headers = ask("responses", proxy, 32000)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("max_tokens clamped")]
    assert lines == [f"max_tokens {headers[HEADER]}"]
