"""Shared fixtures: scripted backends, the proxy on a real port, an ``openai`` SDK client."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from app.local.artifacts import ensure_llama_server, ensure_model
from app.local.llama_server import LlamaServerProcess
from tests.proxy_server import ProxyServer
from tests.scripted_backend import ScriptedBackend

TEMPLATES = Path(__file__).parent / "data" / "templates"
QWEN3_TEMPLATE = TEMPLATES / "Qwen-Qwen3-0.6B.jinja"


@pytest.fixture
def backend_factory() -> Iterator[Callable[..., ScriptedBackend]]:
    started: list[ScriptedBackend] = []

    def make(kind: str = "vllm", **kwargs: Any) -> ScriptedBackend:
        backend = ScriptedBackend(kind, **kwargs).start()
        started.append(backend)
        return backend

    yield make
    for backend in started:
        backend.stop()


@pytest.fixture(scope="module")
def llama() -> Iterator[LlamaServerProcess]:
    """The end-to-end tier's real llama-server on SmolLM2, one per test module that asks for it."""
    server = LlamaServerProcess(ensure_llama_server(), ensure_model(), ctx=2048, threads=2)
    server.start()
    yield server
    server.stop()


@pytest.fixture
def proxy_factory() -> Iterator[Callable[..., ProxyServer]]:
    started: list[ProxyServer] = []

    def make(**settings: Any) -> ProxyServer:
        proxy = ProxyServer(**settings).start()
        started.append(proxy)
        return proxy

    yield make
    for proxy in started:
        proxy.stop()


@pytest.fixture
def qwen3_vllm(backend_factory: Callable[..., ScriptedBackend],
               proxy_factory: Callable[..., ProxyServer]) -> tuple[ScriptedBackend, ProxyServer]:
    """A scripted vLLM backend serving Qwen3-8B, behind a proxy with the Qwen3 template and the
    ``qwen3`` reasoning and ``qwen25`` tool parsers."""
    backend = backend_factory("vllm", model="Qwen/Qwen3-8B")
    proxy = proxy_factory(backend=backend.url, chat_template=str(QWEN3_TEMPLATE), reasoning_parser="qwen3",
                          tool_call_parser="qwen25")
    return backend, proxy


def sse_events(response: httpx.Response) -> list[Any]:
    """The ``data:`` payloads of an SSE response: decoded JSON objects, and ``"[DONE]"``."""
    return [line[6:] if line[6:] == "[DONE]" else json.loads(line[6:])
            for line in response.text.splitlines() if line.startswith("data: ")]


#: how long a test's client waits for an answer before it calls the server hung — not how long an
#: answer should take: the real model on a busy 2-core machine takes tens of seconds now and then
CLIENT_TIMEOUT_S = 120.0


def client_for(proxy: ProxyServer, api_key: str = "unused", **kwargs: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=proxy.url + "/v1", api_key=api_key, max_retries=0, timeout=CLIENT_TIMEOUT_S,
                         **kwargs)
