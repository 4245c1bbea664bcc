"""The FastAPI application: routes, the edge middleware (request ids, auth, metrics, access log),
concurrency limits, and errors as OpenAI error objects (Anthropic's on the ``/v1/messages`` paths).

``create_app(settings)`` builds an app; ``app_from_env()`` is the factory uvicorn workers use
(settings from ``TOOLWIRE_*``).
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import math
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
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.chat import chat_completions
from app.api.completions import completions as passthrough_completions
from app.api.http_protocol import with_header_timeout
from app.api.messages import count_tokens, create_message
from app.api.messages_protocol import error_body as messages_error_body
from app.api.messages_protocol import error_response as messages_error_response
from app.api.respond import RequestScope, error_response
from app.api.responses import create_response, delete_response, input_items, retrieve_response
from app.errors import APIError, BackendError, bad_request, error_body
from app.logs import request_id
from app.metrics import Metrics
from app.runtime import Runtime
from app.settings import Settings
from app.tenancy import request_tenant, tenant_of

log = logging.getLogger("toolwire")
access = logging.getLogger("toolwire.access")

ENDPOINTS = ("/v1/chat/completions", "/v1/completions", "/v1/models", "/health", "/metrics", "/v1/messages",
             "/v1/messages/count_tokens", "/v1/responses")
_REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")


def uvicorn_options(settings: Settings) -> dict[str, Any]:
    """How uvicorn serves the app: a deadline for request headers (slowloris), a bound on open
    connections, idle keep-alive connections closed after 5 s, the shutdown grace."""
    return {"http": with_header_timeout(settings.header_timeout), "limit_concurrency": settings.max_connections,
            "timeout_keep_alive": 5, "timeout_graceful_shutdown": math.ceil(settings.shutdown_grace)}


async def read_json(request: Request, limit: int, timeout: float = 60.0) -> Any:
    """The request body as JSON; 413 past ``limit`` bytes, 408 when it takes longer than
    ``timeout`` seconds to arrive, 400 for non-UTF-8 or invalid JSON."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise APIError(413, f"request body is larger than {limit} bytes", code="body_too_large")
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(timeout):
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise APIError(413, f"request body is larger than {limit} bytes", code="body_too_large")
                chunks.append(chunk)
    except TimeoutError:
        raise APIError(408, f"the request body did not arrive within {timeout:.0f} s", code="body_timeout") from None
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


def _is_json(headers: dict[bytes, bytes]) -> bool:
    """A JSON body's content type (``application/json``, with parameters, or a ``+json`` type)."""
    kind = headers.get(b"content-type", b"").split(b";", 1)[0].strip().lower()
    return kind == b"application/json" or (kind.startswith(b"application/") and kind.endswith(b"+json"))


def model_object(model_id: str) -> dict[str, object]:
    return {"id": model_id, "object": "model", "created": int(time.time()), "owned_by": "toolwire"}


def _presented_key(headers: dict[bytes, bytes]) -> bytes:
    """The API key a request presents: a bearer token, else Anthropic clients' ``x-api-key``."""
    scheme, _, token = headers.get(b"authorization", b"").partition(b" ")
    given = token.strip() if scheme.lower() == b"bearer" else b""
    return given or headers.get(b"x-api-key", b"").strip()


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
        given = _presented_key(headers)
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
        response_started = False

        async def send_with_id(message: Message) -> None:
            nonlocal status, response_started
            if message["type"] == "http.response.start":
                status = message["status"]
                response_started = True
                message["headers"] = [*message.get("headers", []), (b"x-request-id", rid.encode())]
            await send(message)

        def refuse(status_code: int, message: str, code: str, kind: str = "invalid_request_error",
                   headers: dict[str, str] | None = None) -> JSONResponse:
            body = (messages_error_body("authentication_error" if status_code == 401 else kind, message)
                    if path.startswith("/v1/messages") else error_body(message, kind, None, code))
            return JSONResponse(body, status_code=status_code, headers=headers)

        try:
            protected = path.startswith("/v1/") or (path == "/metrics" and not self.settings.metrics_open)
            credentials = [v for k, v in scope["headers"] if k in (b"authorization", b"x-api-key")]
            authorized = len(credentials) <= 1 and self._authorized(headers)
            state = scope.setdefault("state", {})
            state["authorized"] = authorized
            if authorized and self.keys:
                state["tenant"] = tenant_of(_presented_key(headers))
            if protected and len(credentials) > 1:
                response = refuse(400, "send one credential: more than one Authorization / x-api-key header",
                                  "ambiguous_credentials")
            elif protected and not authorized:
                self.metrics.rejected.labels("auth").inc()
                response = refuse(401, "invalid or missing API key", "invalid_api_key",
                                  headers={"WWW-Authenticate": "Bearer"})
            elif scope.get("method") == "POST" and path.startswith("/v1/") and not _is_json(headers):
                response = refuse(415, "send the request body as JSON (Content-Type: application/json)",
                                  "unsupported_media_type")
            else:
                await self.app(scope, receive, send_with_id)
                return
            await response(scope, receive, send_with_id)
        except Exception:
            log.exception("unexpected error")  # logged once, with the request id (the log context has it)
            if not response_started:
                await refuse(500, "internal error", "internal_error", "server_error")(scope, receive, send_with_id)
        finally:
            endpoint = path if path in ENDPOINTS else (
                "/v1/responses/{id}" if path.startswith("/v1/responses/") else
                "/v1/models/{id}" if path.startswith("/v1/models/") else "other")
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

    # no OpenAPI document or docs pages: the API is OpenAI's and Anthropic's, and an open schema
    # endpoint would be served to anyone, keys or not
    app = FastAPI(title="toolwire", version="0.1.0", lifespan=lifespan, docs_url=None, redoc_url=None,
                  openapi_url=None)
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

    @app.get("/health")
    async def health(request: Request) -> JSONResponse:
        """Up or not for anyone; which backend, model and template only with a key (when keys are set)."""
        detailed = request.scope.get("state", {}).get("authorized", True)
        try:
            backend = await runtime.ready_backend()
        except APIError as exc:
            detail = exc.message if detailed else "backend not ready"
            return JSONResponse({"status": "unavailable", "detail": detail}, status_code=503)
        if not await backend.health():
            return JSONResponse({"status": "unavailable", "detail": "backend is not answering"}, status_code=503)
        return JSONResponse({"status": "ok", **(runtime.describe() if detailed else {})})

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(runtime.metrics.render(), media_type=runtime.metrics.content_type)

    @app.get("/v1/models")
    async def models() -> JSONResponse:
        try:
            await runtime.ready_backend()
        except APIError:
            pass  # the served name is known without the backend when --model is given
        return JSONResponse({"object": "list", "data": [model_object(runtime.model_name)]})

    @app.get("/v1/models/{model_id:path}")
    async def model(model_id: str) -> JSONResponse:
        """The served model by its id (OpenAI's 404 object for any other id)."""
        try:
            await runtime.ready_backend()
        except APIError:
            pass
        if model_id != runtime.model_name:
            raise APIError(404, f"The model {model_id!r} does not exist; this server serves "
                                f"{runtime.model_name!r}", code="model_not_found", param="model")
        return JSONResponse(model_object(model_id))

    # the two generation endpoints are plain Starlette routes: FastAPI's dependency machinery would
    # add measurable latency before the first token, and they take the raw request anyway
    async def chat(request: Request) -> Response:
        body = await read_json(request, settings.max_body_bytes, settings.body_timeout)
        release = take_slot()
        return await chat_completions(body, runtime, RequestScope(request=request, release=release))

    async def completions(request: Request) -> Response:
        """Passed through to the backend's OpenAI-style completions endpoint, within the limits."""
        body = await read_json(request, settings.max_body_bytes, settings.body_timeout)
        release = take_slot()
        return await passthrough_completions(body, runtime, RequestScope(request=request, release=release))

    app.add_route("/v1/chat/completions", chat, methods=["POST"])
    app.add_route("/v1/completions", completions, methods=["POST"])
    add_messages_routes(app, runtime, take_slot)
    add_responses_routes(app, runtime, take_slot)
    return app


def add_responses_routes(app: FastAPI, runtime: Runtime, take_slot: Callable[[], Callable[[], None]]) -> None:
    """The OpenAI Responses API (``app.api.responses``); errors in OpenAI's shape, as on chat."""
    limit = runtime.settings.max_body_bytes

    async def create(request: Request) -> Response:
        body = await read_json(request, limit, runtime.settings.body_timeout)
        release = take_slot()
        return await create_response(body, runtime, RequestScope(request=request, release=release))

    async def one(request: Request) -> Response:
        response_id = request.path_params["response_id"]
        if request.method == "DELETE":
            return await delete_response(response_id, runtime, request_tenant(request.scope))
        return await retrieve_response(response_id, runtime, request_tenant(request.scope))

    async def items(request: Request) -> Response:
        return await input_items(request.path_params["response_id"], request, runtime, request_tenant(request.scope))

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
            body = await read_json(request, limit, runtime.settings.body_timeout)
            release = take_slot()
            return await create_message(body, runtime, RequestScope(request=request, release=release))
        return await answer(work())

    async def tokens(request: Request) -> Response:
        async def work() -> Response:
            return await count_tokens(await read_json(request, limit, runtime.settings.body_timeout), runtime)
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
    with_header_timeout(settings.header_timeout)
    return create_app(settings)
