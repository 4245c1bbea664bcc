"""The FastAPI application: routes, the edge middleware (request ids, auth, metrics, access log),
concurrency limits, and errors as OpenAI error objects (Anthropic's on the ``/v1/messages`` paths).

``create_app(settings)`` builds an app; ``app_from_env()`` is the factory uvicorn workers use
(settings from ``TOOLWIRE_*``).
"""

from __future__ import annotations

import hmac
import logging
import re
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware.cors import CORSMiddleware
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.chat import chat_completions
from app.api.messages import count_tokens, create_message
from app.api.messages_protocol import error_body as messages_error_body
from app.api.messages_protocol import error_response as messages_error_response
from app.api.respond import RequestScope, error_response
from app.api.responses import create_response, delete_response, input_items, retrieve_response
from app.backends.streamhttp import StreamError
from app.errors import APIError, BackendError, bad_request, error_body
from app.logs import request_id
from app.metrics import Metrics
from app.runtime import Runtime
from app.settings import Settings

log = logging.getLogger("toolwire")
access = logging.getLogger("toolwire.access")

ENDPOINTS = ("/v1/chat/completions", "/v1/completions", "/v1/models", "/health", "/metrics", "/v1/messages",
             "/v1/messages/count_tokens", "/v1/responses")
_REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")


async def read_json(request: Request, limit: int) -> Any:
    """The request body as JSON; 413 past ``limit`` bytes, 400 for non-UTF-8 or invalid JSON."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise APIError(413, f"request body is larger than {limit} bytes", code="body_too_large")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise APIError(413, f"request body is larger than {limit} bytes", code="body_too_large")
        chunks.append(chunk)
    raw = b"".join(chunks)
    if not raw.strip():
        raise bad_request("request body is empty; expected a JSON object")
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        raise bad_request("request body is not valid UTF-8") from None
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise bad_request(f"request body is not valid JSON: {exc}") from None


class EdgeMiddleware:
    """Pure ASGI middleware: request id (``X-Request-ID`` honoured and returned), bearer auth on
    ``/v1/*`` (and ``/metrics`` unless open), request counts and latency, one access-log line per
    request (method, path, status, duration — never content)."""

    def __init__(self, app: ASGIApp, settings: Settings, metrics: Metrics) -> None:
        self.app = app
        self.settings = settings
        self.metrics = metrics
        self.keys = [k.encode() for k in settings.accepted_keys()]

    def _authorized(self, headers: dict[bytes, bytes]) -> bool:
        if not self.keys:
            return True
        scheme, _, token = headers.get(b"authorization", b"").partition(b" ")
        given = token.strip() if scheme.lower() == b"bearer" else b""
        given = given or headers.get(b"x-api-key", b"").strip()  # Anthropic clients' header
        if not given:
            return False
        matched = False
        for key in self.keys:  # compare with every key: the time taken does not depend on which matched
            matched |= hmac.compare_digest(given, key)
        return matched

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path: str = scope["path"]
        headers = dict(scope["headers"])
        given = headers.get(b"x-request-id", b"").decode("latin-1")
        rid = given if _REQUEST_ID.fullmatch(given) else uuid.uuid4().hex
        token = request_id.set(rid)
        started = time.monotonic()
        status = 500

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message["headers"] = [*message.get("headers", []), (b"x-request-id", rid.encode())]
            await send(message)

        try:
            protected = path.startswith("/v1/") or (path == "/metrics" and not self.settings.metrics_open)
            if protected and not self._authorized(headers):
                self.metrics.rejected.labels("auth").inc()
                body = (messages_error_body("authentication_error", "invalid or missing API key")
                        if path.startswith("/v1/messages") else
                        error_body("invalid or missing API key", "invalid_request_error", None, "invalid_api_key"))
                response = JSONResponse(body, status_code=401, headers={"WWW-Authenticate": "Bearer"})
                await response(scope, receive, send_with_id)
                return
            await self.app(scope, receive, send_with_id)
        finally:
            endpoint = path if path in ENDPOINTS else (
                "/v1/responses/{id}" if path.startswith("/v1/responses/") else "other")
            elapsed = time.monotonic() - started
            self.metrics.requests.labels(endpoint, str(status)).inc()
            self.metrics.latency.labels(endpoint).observe(elapsed)
            access.info("request", extra={"fields": {
                "method": scope.get("method"), "path": path, "status": status, "duration_ms": round(elapsed * 1000, 1)}})
            request_id.reset(token)


def create_app(settings: Settings, runtime: Runtime | None = None) -> FastAPI:
    runtime = runtime or Runtime(settings)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await runtime.start()
        try:
            yield
        finally:
            await runtime.stop()

    app = FastAPI(title="toolwire", version="0.1.0", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.runtime = runtime
    if settings.cors_origins:
        app.add_middleware(CORSMiddleware, allow_origins=settings.cors_origins, allow_methods=["*"],
                           allow_headers=["*"], expose_headers=["X-Request-ID"])
    app.add_middleware(EdgeMiddleware, settings=settings, metrics=runtime.metrics)

    def take_slot() -> Any:
        release = runtime.slots.try_acquire()
        if release is None:
            runtime.metrics.rejected.labels("concurrency").inc()
            raise APIError(429, f"too many concurrent requests (limit {settings.max_concurrency}); retry shortly",
                           "rate_limit_error", code="rate_limit_exceeded", headers={"Retry-After": "1"})
        return release

    @app.exception_handler(APIError)
    async def api_error(_: Request, exc: APIError) -> JSONResponse:
        if isinstance(exc, BackendError):
            log.warning("backend error: %s", exc.message)
        return error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse(error_body(f"invalid request: {exc.errors()[0].get('msg', '')}"), status_code=400)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        kind = "invalid_request_error" if exc.status_code < 500 else "server_error"
        code = "not_found" if exc.status_code == 404 else None
        return JSONResponse(error_body(str(exc.detail), kind, None, code), status_code=exc.status_code)

    @app.exception_handler(Exception)
    async def unexpected(_: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error")
        return JSONResponse(error_body("internal error", "server_error"), status_code=500)

    @app.get("/health")
    async def health() -> JSONResponse:
        try:
            backend = await runtime.ready_backend()
        except APIError as exc:
            return JSONResponse({"status": "unavailable", "detail": exc.message}, status_code=503)
        if not await backend.health():
            return JSONResponse({"status": "unavailable", "detail": "backend is not answering"}, status_code=503)
        return JSONResponse({"status": "ok", **runtime.describe()})

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(runtime.metrics.render(), media_type=runtime.metrics.content_type)

    @app.get("/v1/models")
    async def models() -> JSONResponse:
        try:
            await runtime.ready_backend()
        except APIError:
            pass  # the served name is known without the backend when --model is given
        return JSONResponse({"object": "list", "data": [
            {"id": runtime.model_name, "object": "model", "created": int(time.time()), "owned_by": "toolwire"}]})

    # the two generation endpoints are plain Starlette routes: FastAPI's dependency machinery would
    # add measurable latency before the first token, and they take the raw request anyway
    async def chat(request: Request) -> Response:
        body = await read_json(request, settings.max_body_bytes)
        release = take_slot()
        return await chat_completions(body, runtime, RequestScope(request=request, release=release))

    async def completions(request: Request) -> Response:
        """Passed through to the backend's OpenAI-style completions endpoint."""
        body = await read_json(request, settings.max_body_bytes)
        if not isinstance(body, dict):
            raise bad_request("request body must be a JSON object")
        release = take_slot()
        try:
            backend = await runtime.ready_backend()
            if backend.model:
                body["model"] = backend.model
            upstream = await backend.open_stream("/v1/completions", body)
        except BaseException:
            release()
            raise
        if not body.get("stream"):
            try:
                raw = await upstream.aread()
            except StreamError as exc:
                raise BackendError(502, f"backend stream broke: {exc}", kind="dropped") from exc
            finally:
                await upstream.aclose()
                release()
            return Response(raw, media_type="application/json")

        async def relay() -> AsyncIterator[bytes]:
            try:
                async for chunk in upstream.aiter_bytes():
                    yield chunk
            except StreamError:
                yield b'data: {"error": {"message": "backend stream broke", "type": "server_error"}}\n\n'
            finally:
                await upstream.aclose()
                release()

        return StreamingResponse(relay(), media_type="text/event-stream")

    app.add_route("/v1/chat/completions", chat, methods=["POST"])
    app.add_route("/v1/completions", completions, methods=["POST"])
    add_messages_routes(app, runtime, take_slot)
    add_responses_routes(app, runtime, take_slot)
    return app


def add_responses_routes(app: FastAPI, runtime: Runtime, take_slot: Callable[[], Callable[[], None]]) -> None:
    """The OpenAI Responses API (``app.api.responses``); errors in OpenAI's shape, as on chat."""
    limit = runtime.settings.max_body_bytes

    async def create(request: Request) -> Response:
        body = await read_json(request, limit)
        release = take_slot()
        return await create_response(body, runtime, RequestScope(request=request, release=release))

    async def one(request: Request) -> Response:
        response_id = request.path_params["response_id"]
        if request.method == "DELETE":
            return await delete_response(response_id, runtime)
        return await retrieve_response(response_id, runtime)

    async def items(request: Request) -> Response:
        return await input_items(request.path_params["response_id"], request, runtime)

    app.add_route("/v1/responses", create, methods=["POST"])
    app.add_route("/v1/responses/{response_id}", one, methods=["GET", "DELETE"])
    app.add_route("/v1/responses/{response_id}/input_items", items, methods=["GET"])


def add_messages_routes(app: FastAPI, runtime: Runtime, take_slot: Callable[[], Callable[[], None]]) -> None:
    """The Anthropic Messages API (``app.api.messages``); every error on its paths in Anthropic's shape."""
    limit = runtime.settings.max_body_bytes

    async def answer(work: Any) -> Response:
        try:
            return await work
        except APIError as exc:
            if isinstance(exc, BackendError):
                log.warning("backend error: %s", exc.message)
            return messages_error_response(exc)
        except Exception:  # never a stack trace to the client
            log.exception("unexpected error")
            return messages_error_response(APIError(500, "internal error", "server_error"))

    async def create(request: Request) -> Response:
        async def work() -> Response:
            body = await read_json(request, limit)
            release = take_slot()
            return await create_message(body, runtime, RequestScope(request=request, release=release))
        return await answer(work())

    async def tokens(request: Request) -> Response:
        async def work() -> Response:
            return await count_tokens(await read_json(request, limit), runtime)
        return await answer(work())

    async def not_found(request: Request) -> Response:
        return messages_error_response(APIError(404, f"{request.method} {request.url.path} is not served here"))

    app.add_route("/v1/messages", create, methods=["POST"])
    app.add_route("/v1/messages/count_tokens", tokens, methods=["POST"])
    app.add_route("/v1/messages/{rest:path}", not_found, methods=["GET", "POST", "DELETE"])


def app_from_env() -> FastAPI:
    """uvicorn factory for worker processes: settings come from ``TOOLWIRE_*``."""
    from app.logs import configure

    settings = Settings()
    configure(settings.log_level)
    return create_app(settings)
