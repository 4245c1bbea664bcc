"""One streamed exchange per face (Chat Completions, legacy completions, Responses, Messages) on the
real llama-server, with the official clients — the end-to-end part of the lowest-versions run
(``make test-lowest``), and of the e2e tier."""

from __future__ import annotations

from collections.abc import Iterator

import anthropic
import pytest

from app.local.artifacts import ensure_llama_server, ensure_model
from app.local.llama_server import LlamaServerProcess
from tests.conftest import CLIENT_TIMEOUT_S, client_for
from tests.proxy_server import ProxyServer

pytestmark = pytest.mark.e2e

ASK = "Say hello to Ada in one short sentence."


@pytest.fixture(scope="module")
def proxy() -> Iterator[ProxyServer]:
    llama = LlamaServerProcess(ensure_llama_server(), ensure_model(), ctx=2048, threads=2)
    llama.start()
    server = ProxyServer(backend=llama.url).start()
    yield server
    server.stop()
    llama.stop()


def test_chat_completions_streamed(proxy: ProxyServer) -> None:
    chunks = list(client_for(proxy).chat.completions.create(
        model="m", messages=[{"role": "user", "content": ASK}], max_tokens=8, temperature=0, stream=True))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text.strip() and chunks[-1].choices[0].finish_reason in ("stop", "length")


def test_completions_streamed(proxy: ProxyServer) -> None:
    chunks = list(client_for(proxy).completions.create(model="m", prompt="Hello, my name is", max_tokens=8,
                                                       temperature=0, stream=True))
    assert "".join(c.choices[0].text for c in chunks if c.choices).strip()


def test_responses_streamed(proxy: ProxyServer) -> None:
    events = list(client_for(proxy).responses.create(model="m", input=ASK, max_output_tokens=8, stream=True))
    done = events[-1]  # incomplete when the 8 tokens ran out first
    assert done.type in ("response.completed", "response.incomplete") and done.response.output_text.strip()


def test_messages_streamed(proxy: ProxyServer) -> None:
    client = anthropic.Anthropic(base_url=proxy.url, api_key="unused", max_retries=0, timeout=CLIENT_TIMEOUT_S)
    with client.messages.stream(model="m", max_tokens=8, messages=[{"role": "user", "content": ASK}]) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text.strip() and final.stop_reason in ("end_turn", "max_tokens")
