"""toolwire is a FastAPI app: one of the test's own FastAPI apps mounts it, another includes its
router, each beside a route, a dependency and a middleware of its own; a full tool loop goes through
each with the official ``openai`` SDK. The OpenAPI document: off by default, generated from the
faces' request models when on, behind the API keys when keys are set."""

from __future__ import annotations

import inspect
import json
import tempfile
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
import uvicorn
from fastapi import Depends, FastAPI, Request
from starlette.types import Message

from app.api.server import create_app, create_router, uvicorn_options
from app.settings import Settings
from tests.agent_round_trip import CITY, scripted_model
from tests.conftest import QWEN3_TEMPLATE
from tests.proxy_server import free_port
from tests.scripted_backend import ScriptedBackend

TOOLS: list[Any] = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
RESULT = "Sunny, 12 C"
ANSWER = "It is sunny in Reykjavik."


class Served:
    """An ASGI app on a real loopback port (uvicorn in a thread, toolwire's protocol options)."""

    def __init__(self, app: Any, settings: Settings) -> None:
        self.port = free_port()
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="on",
                                **{**uvicorn_options(settings), "timeout_graceful_shutdown": 2})
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            assert time.monotonic() < deadline and self.thread.is_alive(), "the app did not start"
            time.sleep(0.02)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)


@pytest.fixture
def backend() -> Iterator[ScriptedBackend]:
    server = ScriptedBackend("vllm", model="Qwen/Qwen3-8B").start()
    server.responder = scripted_model(RESULT, ANSWER)
    yield server
    server.stop()


def settings_for(backend: ScriptedBackend, **more: Any) -> Settings:
    return Settings(backend=backend.url, chat_template=str(QWEN3_TEMPLATE), reasoning_parser="qwen3",
                    tool_call_parser="qwen25", retries=0, state_dir=tempfile.mkdtemp(prefix="toolwire-state-"),
                    **more)


def host_app(lifespan: Any = None) -> FastAPI:
    """An app of the test's own: a middleware that stamps every response, a dependency, a route."""
    app = FastAPI(lifespan=lifespan)

    @app.middleware("http")
    async def stamp(request: Request, call_next: Any) -> Any:
        response = await call_next(request)
        response.headers["x-host-app"] = "yes"
        return response

    def caller(request: Request) -> str:
        return request.headers.get("x-caller", "nobody")

    @app.get("/hello")
    async def hello(who: str = Depends(caller)) -> dict[str, str]:
        return {"hello": who}

    return app


def tool_loop(client: openai.OpenAI, stream: bool) -> None:
    """Ask; run the call the model makes; send its result back; get the answer."""
    messages: list[Any] = [{"role": "system", "content": "Answer with the tool."},
                           {"role": "user", "content": f"Weather in {CITY}?"}]
    if stream:
        calls: dict[int, dict[str, Any]] = {}
        with client.chat.completions.create(model="m", messages=messages, tools=TOOLS, stream=True) as chunks:
            for chunk in chunks:
                for delta_call in chunk.choices[0].delta.tool_calls or [] if chunk.choices else []:
                    call = calls.setdefault(delta_call.index, {"id": "", "name": "", "arguments": ""})
                    call["id"] = delta_call.id or call["id"]
                    if delta_call.function:
                        call["name"] += delta_call.function.name or ""
                        call["arguments"] += delta_call.function.arguments or ""
        [call] = calls.values()
        call_id, name, arguments = call["id"], call["name"], call["arguments"]
    else:
        first = client.chat.completions.create(model="m", messages=messages, tools=TOOLS)
        assert first.choices[0].finish_reason == "tool_calls"
        [made] = first.choices[0].message.tool_calls or []
        assert made.type == "function"
        call_id, name, arguments = made.id, made.function.name, made.function.arguments
    assert name == "get_weather" and json.loads(arguments) == {"city": CITY}
    messages += [{"role": "assistant", "content": None, "tool_calls": [
        {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}]},
                 {"role": "tool", "tool_call_id": call_id, "content": RESULT}]
    second = client.chat.completions.create(model="m", messages=messages, tools=TOOLS)
    assert second.choices[0].message.content == ANSWER and second.choices[0].finish_reason == "stop"


def check_host_app(url: str) -> None:
    hello = httpx.get(url + "/hello", headers={"x-caller": "test"}, timeout=10)
    assert hello.json() == {"hello": "test"} and hello.headers["x-host-app"] == "yes"


def loops_and_refusal(base: str) -> httpx.Response:
    """Served at ``base``, beside the host app's own route: a tool loop streamed and one whole with
    the ``openai`` SDK, and a request without the key refused by toolwire's edge (returned)."""
    check_host_app(base.rsplit("/llm", 1)[0])
    client = openai.OpenAI(base_url=base + "/v1", api_key="k1", max_retries=0, timeout=30)
    tool_loop(client, stream=True)
    tool_loop(client, stream=False)
    refused = httpx.post(base + "/v1/chat/completions", json={}, timeout=10)
    assert refused.status_code == 401 and refused.json()["error"]["code"] == "invalid_api_key"
    assert refused.headers["x-request-id"]
    return refused


def test_toolwire_mounted_in_an_app_of_ones_own(backend: ScriptedBackend) -> None:
    settings = settings_for(backend, api_key=["k1"])
    toolwire = create_app(settings)
    assert isinstance(toolwire, FastAPI)
    host = host_app(lifespan=toolwire.router.lifespan_context)  # a mounted app's lifespan is the host's to run
    host.mount("/llm", toolwire)
    served = Served(host, settings)
    try:
        refused = loops_and_refusal(served.url + "/llm")
        assert refused.headers["x-host-app"] == "yes"  # toolwire's edge holds under the mount, inside the host's
        missing = httpx.get(served.url + "/llm/v1/nothing", headers={"authorization": "Bearer k1"}, timeout=10)
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
        assert httpx.get(served.url + "/llm/livez", timeout=10).json() == {"status": "ok"}
    finally:
        served.stop()


def test_toolwire_router_included_in_an_app_of_ones_own(backend: ScriptedBackend) -> None:
    settings = settings_for(backend, api_key=["k1"])
    host = host_app()
    host.include_router(create_router(settings))  # its lifespan (toolwire's start and stop) comes with it
    served = Served(host, settings)
    try:
        loops_and_refusal(served.url)
        bad = httpx.post(served.url + "/v1/messages", json={"model": "m"}, timeout=10,
                         headers={"x-api-key": "k1"})
        assert bad.status_code == 400 and bad.json()["type"] == "error"  # the Messages face's own shape
        assert httpx.get(served.url + "/hello", timeout=10).status_code == 200  # no key: the host's route is its own
    finally:
        served.stop()


def test_openapi_is_off_by_default(backend: ScriptedBackend) -> None:
    app = create_app(settings_for(backend))
    assert app.openapi_url is None
    served = Served(app, app.state.runtime.settings)
    try:
        assert httpx.get(served.url + "/openapi.json", timeout=10).status_code == 404
        assert httpx.get(served.url + "/docs", timeout=10).status_code == 404
    finally:
        served.stop()


def test_openapi_document_from_the_request_models_behind_the_keys(backend: ScriptedBackend) -> None:
    from app.api.chat.protocol import ChatCompletionRequest
    from app.api.messages.protocol import MessagesRequest

    settings = settings_for(backend, api_key=["k1"], openapi=True)
    app = create_app(settings)

    @app.get("/mine")
    async def mine() -> dict[str, str]:
        return {}

    served = Served(app, settings)
    try:
        assert httpx.get(served.url + "/openapi.json", timeout=10).status_code == 401
        document = httpx.get(served.url + "/openapi.json", headers={"authorization": "Bearer k1"}, timeout=10).json()
    finally:
        served.stop()
    paths, schemas = document["paths"], document["components"]["schemas"]
    assert {"/v1/chat/completions", "/v1/responses", "/v1/messages", "/v1/completions", "/v1/models", "/mine"} <= set(
        paths)
    body = paths["/v1/chat/completions"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert body == {"$ref": "#/components/schemas/ChatCompletionRequest"}
    for model in (ChatCompletionRequest, MessagesRequest):
        assert set(model.model_fields) <= set(schemas[model.__name__]["properties"]), model.__name__
    assert "messages" in schemas["ChatCompletionRequest"]["required"]


def test_the_openapi_flag_and_variable() -> None:
    from app.cli import build_parser

    assert Settings(backend="http://x").openapi is False
    parsed = build_parser().parse_args(["serve", "--backend", "http://x", "--openapi"])
    assert parsed.openapi is True


def test_openapi_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOLWIRE_OPENAPI", "1")
    assert Settings(backend="http://x").openapi is True


def _providers_asked(monkeypatch: pytest.MonkeyPatch, settings: Settings) -> int:
    """How often one request to the app makes FastAPI ask for the global tracer provider."""
    from opentelemetry import trace

    asked: list[int] = []
    real = trace.get_tracer_provider

    def counted() -> Any:
        asked.append(1)
        return real()

    monkeypatch.setattr(trace, "get_tracer_provider", counted)
    app = create_app(settings)
    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Message) -> None:
        sent.append(message)

    import asyncio

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET", "path": "/livez",
             "raw_path": b"/livez", "root_path": "", "scheme": "http", "query_string": b"", "headers": [],
             "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 2), "state": {}}
    asyncio.run(app(scope, receive, send))
    assert sent[0]["status"] == 200
    return len(asked)


@pytest.mark.skipif("telemetry" not in inspect.signature(FastAPI.__init__).parameters,
                    reason="this FastAPI has no native OpenTelemetry")
def test_fastapi_s_telemetry_looks_for_providers_only_where_the_sdk_is(backend: ScriptedBackend,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    settings = settings_for(backend)
    assert importlib.util.find_spec("opentelemetry.sdk") is None  # toolwire's own install: the API only
    assert _providers_asked(monkeypatch, settings) == 0
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: real_find_spec("json") if name == "opentelemetry.sdk" else real_find_spec(name, *a))
    assert _providers_asked(monkeypatch, settings) >= 1  # with the SDK, FastAPI's defaults: it looks per request
