"""The FastAPI application: routes, auth, and errors as OpenAI error objects.

``create_app(settings)`` builds an app; ``app_from_env()`` is the factory uvicorn workers use
(settings from ``TOOLWIRE_*``).
"""

from __future__ import annotations

import hmac
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import JSONResponse, Response, StreamingResponse

from app.chat import chat_completions, error_response
from app.errors import APIError, BackendError, bad_request, error_body
from app.runtime import Runtime
from app.settings import Settings

log = logging.getLogger("toolwire")


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


def create_app(settings: Settings, runtime: Runtime | None = None) -> FastAPI:
    runtime = runtime or Runtime(settings)
    keys = [k.encode() for k in settings.accepted_keys()]

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await runtime.start()
        try:
            yield
        finally:
            await runtime.stop()

    app = FastAPI(title="toolwire", version="0.1.0", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.runtime = runtime

    def authorized(request: Request) -> bool:
        if not keys:
            return True
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token:
            return False
        given = token.strip().encode()
        matched = False
        for key in keys:  # compare against every key: time does not depend on which one matched
            matched |= hmac.compare_digest(given, key)
        return matched

    @app.middleware("http")
    async def guard(request: Request, call_next: Any) -> Response:
        path = request.url.path
        if (path.startswith("/v1/") or (path == "/metrics" and not settings.metrics_open)) and not authorized(request):
            return JSONResponse(error_body("invalid or missing API key", "invalid_request_error", None,
                                           "invalid_api_key"), status_code=401,
                                headers={"WWW-Authenticate": "Bearer"})
        return await call_next(request)

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

    @app.get("/v1/models")
    async def models() -> JSONResponse:
        try:
            await runtime.ready_backend()
        except APIError:
            pass  # the served name is known without the backend when --model is given
        return JSONResponse({"object": "list", "data": [
            {"id": runtime.model_name, "object": "model", "created": int(time.time()), "owned_by": "toolwire"}]})

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Response:
        body = await read_json(request, settings.max_body_bytes)
        return await chat_completions(body, runtime)

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        """Passed through to the backend's OpenAI-style completions endpoint."""
        body = await read_json(request, settings.max_body_bytes)
        if not isinstance(body, dict):
            raise bad_request("request body must be a JSON object")
        backend = await runtime.ready_backend()
        if backend.model:
            body["model"] = backend.model
        upstream = await backend.open_stream("/v1/completions", body)
        if not body.get("stream"):
            try:
                raw = await upstream.aread()
            finally:
                await upstream.aclose()
            return Response(raw, media_type="application/json")

        async def relay() -> AsyncIterator[bytes]:
            try:
                async for chunk in upstream.aiter_raw():
                    yield chunk
            except httpx.HTTPError:
                yield b'data: {"error": {"message": "backend stream broke", "type": "server_error"}}\n\n'
            finally:
                await upstream.aclose()

        return StreamingResponse(relay(), media_type="text/event-stream")

    return app


def app_from_env() -> FastAPI:
    """uvicorn factory for worker processes: settings come from ``TOOLWIRE_*``."""
    return create_app(Settings())
