"""The ASGI application (FastAPI): the faces' routes (``FACES``, each mounted the same way), the process's
own routes (health, readiness, models, metrics), the edge middleware (request ids, auth, tenants,
metrics, access log) and errors in each face's shape.

``create_app(settings)`` builds a ``fastapi.FastAPI``: add routes, dependencies and middleware to it
as to any FastAPI app, or mount it in one of yours (its lifespan is ``app.router.lifespan_context``).
``create_router(settings)`` gives the same routes as an ``APIRouter`` to ``include_router`` in an
app of yours, each route behind the edge of its own (auth, request ids, metrics), with the lifespan
that starts toolwire. ``app_from_env()`` is the factory uvicorn workers use (settings from
``TOOLWIRE_*``).

toolwire's own routes are plain ASGI routes (``starlette.routing.Route`` with an ASGI endpoint, in
``app.router.routes``): each reads its body, decodes it with the face's own pydantic models and
answers every error in its face's shape, so FastAPI's per-route machinery (dependency resolution,
response validation) would only add work on the first token's path. The OpenAPI document
(``--openapi``) is generated from the same request models.
"""

from __future__ import annotations

import asyncio
import hmac
import importlib.util
import inspect
import logging
import math
import re
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import orjson
from fastapi import APIRouter, FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, compile_path
from starlette.routing import Route as ASGIRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api import chat, completions, conversations, messages, responses
from app.api.answer import ClientGone, Exchange
from app.api.chat.protocol import ChatCompletionRequest
from app.api.completions.protocol import CompletionRequest
from app.api.face import Face, Route, face_for, openai_error
from app.api.http_protocol import protocol
from app.api.messages.protocol import Conversation, MessagesRequest
from app.api.responses.protocol import ResponsesRequest
from app.bodies import Elements
from app.errors import APIError, BackendError, bad_request
from app.logs import request_id
from app.metrics import Metrics
from app.pipeline.offload import Turns
from app.prefix import PrefixService, scope_of
from app.runtime import Runtime
from app.settings import Settings
from app.tenancy import request_tenant, tenant_of

log = logging.getLogger("toolwire")
access = logging.getLogger("toolwire.access")

#: the APIs toolwire speaks; a new face is one more entry (see CONTRIBUTING.md)
FACES: tuple[Face, ...] = (chat.FACE, completions.FACE, responses.FACE, conversations.FACE, messages.FACE)
_REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")


def http_protocol(settings: Settings) -> type:
    """The HTTP protocol class uvicorn serves with, bounded as ``settings`` says."""
    return protocol(settings.header_timeout, settings.max_header_bytes, settings.max_headers)


def uvicorn_options(settings: Settings) -> dict[str, Any]:
    """How uvicorn serves the app: bounds on a request's head (a deadline, a size, a header count), a
    bound on open connections, idle keep-alive connections closed after 5 s, the shutdown grace.
    (uvicorn's own access log is off through ``app.logs.configure``, which every process that
    serves runs.)"""
    return {"http": http_protocol(settings), "limit_concurrency": settings.max_connections,
            "timeout_keep_alive": 5, "timeout_graceful_shutdown": math.ceil(settings.shutdown_grace)}


async def read_json(request: Request, limit: int, timeout: float = 60.0, turns: Turns | None = None,
                    parse: Callable[[bytes], Any] = orjson.loads) -> Any:
    """The request body as JSON (``parse``d: ``orjson.loads`` or what answers and fails as it); 413
    past ``limit`` bytes, 408 when it takes longer than ``timeout`` seconds to arrive, 400 for
    non-UTF-8 or invalid JSON, 499 when the client leaves before it has sent it all. With ``turns``,
    a large body is parsed (and the request goes on) on its turn at the loop. Read straight from
    the ASGI messages (no stream object per request)."""
    declared = next((value for name, value in request.scope["headers"] if name == b"content-length"), b"")
    if declared.isdigit() and int(declared) > limit:
        raise APIError(413, f"request body is larger than {limit} bytes", code="body_too_large")
    receive = request.receive
    chunks: list[bytes] = []
    size = 0
    more = True
    try:
        async with asyncio.timeout(timeout):
            while more:
                message = await receive()
                if message["type"] != "http.request":  # http.disconnect: nobody is left to answer
                    raise ClientGone()
                chunk = message.get("body", b"")
                more = message.get("more_body", False)
                if chunk:
                    size += len(chunk)
                    if size > limit:
                        raise APIError(413, f"request body is larger than {limit} bytes", code="body_too_large")
                    chunks.append(chunk)
    except TimeoutError:
        raise APIError(408, f"the request body did not arrive within {timeout:.0f} s", code="body_timeout") from None
    raw = chunks[0] if len(chunks) == 1 else b"".join(chunks)
    if turns is not None:
        await turns.take(size)
    try:
        return parse(raw)  # it refuses invalid UTF-8 too: the checks below only pick the message
    except orjson.JSONDecodeError as exc:
        if not raw.strip():
            raise bad_request("request body is empty; expected a JSON object") from None
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError:
            raise bad_request("request body is not valid UTF-8") from None
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
    ``/v1/*`` (and ``/metrics`` unless open, and the OpenAPI document) and the request's tenant,
    request counts and latency by route, one access-log line per request (method, path, status,
    duration — never content). Refusals take the shape of the face whose path was asked for.

    As an app's middleware it sees every path (relative to the app's ``root_path`` when mounted);
    wrapped around one route (``route``: its path, as ``create_router`` does) it decides protection,
    label and error shape by that route's path."""

    def __init__(self, app: ASGIApp, settings: Settings, metrics: Metrics, faces: Sequence[Face],
                 default: Face, route: str | None = None) -> None:
        self.app = app
        self.settings = settings
        self.metrics = metrics
        self.faces = faces
        self.default = default
        self.route = route
        self.keys = [k.encode() for k in settings.accepted_keys()]
        self.labels = [(compile_path(route.path)[0], route.path) for face in (*faces, default) for route in face.routes]

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

    def _label(self, path: str) -> str:
        for pattern, label in self.labels:
            if pattern.match(path):
                return label
        return "other"

    def _protected(self, path: str) -> bool:
        return path.startswith("/v1/") or (path == OPENAPI_PATH and self.settings.openapi) or (
            path == "/metrics" and not self.settings.metrics_open)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path: str = self.route or _route_path(scope)
        headers = dict(scope["headers"])
        given = headers.get(b"x-request-id", b"").decode("latin-1")
        rid = given if _REQUEST_ID.fullmatch(given) else secrets.token_hex(16)
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

        def refuse(exc: APIError) -> Response:
            return face_for(path, self.faces, self.default).error_response(exc)

        state = scope.setdefault("state", {})
        try:
            protected = self._protected(path)
            credentials = [v for k, v in scope["headers"] if k in (b"authorization", b"x-api-key")]
            authorized = len(credentials) <= 1 and self._authorized(headers)
            state["authorized"] = authorized
            if authorized and self.keys:
                state["tenant"] = tenant_of(_presented_key(headers))
            if protected and len(credentials) > 1:
                response = refuse(bad_request("send one credential: more than one Authorization / x-api-key header",
                                              code="ambiguous_credentials"))
            elif protected and not authorized:
                self.metrics.rejected.labels("auth").inc()
                response = refuse(APIError(401, "invalid or missing API key", code="invalid_api_key",
                                           headers={"WWW-Authenticate": "Bearer"}))
            elif scope.get("method") == "POST" and path.startswith("/v1/") and not _is_json(headers):
                response = refuse(APIError(415, "send the request body as JSON (Content-Type: application/json)",
                                           code="unsupported_media_type"))
            else:
                await self.app(scope, receive, send_with_id)
                return
            await response(scope, receive, send_with_id)
        except Exception:
            log.exception("unexpected error")  # logged once, with the request id (the log context has it)
            if not response_started:
                await refuse(APIError(500, "internal error", "server_error", code="internal_error"))(
                    scope, receive, send_with_id)
        finally:
            endpoint = state.get("endpoint") or self.route or self._label(path)
            elapsed = time.monotonic() - started
            self.metrics.requests.labels(endpoint, str(status)).inc()
            self.metrics.latency.labels(endpoint).observe(elapsed)
            if access.isEnabledFor(logging.INFO):  # (--log-level warning: nothing built for it)
                access.info("request", extra={"fields": {
                    "method": scope.get("method"), "path": scope["path"], "status": status,
                    "duration_ms": round(elapsed * 1000, 1)}})
            request_id.reset(token)


def _route_path(scope: Scope) -> str:
    """The path as the app's routes see it: without the ``root_path`` it is mounted under (as
    Starlette's router takes it)."""
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    return path[len(root):] or "/" if root and path.startswith(root) else path


class Endpoint:
    """One route's endpoint as an ASGI app: the request handed to the face's handler, its response
    sent. An ASGI app, not a function, so that Starlette's ``Route`` serves it as it is (no
    per-request wrapping of its own)."""

    __slots__ = ("handle",)

    def __init__(self, handle: Callable[[Request], Awaitable[Response]]) -> None:
        self.handle = handle

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = await self.handle(Request(scope, receive, send))
        await response(scope, receive, send)


class Read:
    """One body's parse through the prefix service (``PrefixService.read_body``), and the elements
    of its growing list it found (``None``: no such list)."""

    __slots__ = ("elements", "key", "prefix", "scope")

    def __init__(self, prefix: PrefixService, scope: bytes, key: str) -> None:
        self.prefix, self.scope, self.key = prefix, scope, key
        self.elements: Elements | None = None

    def parse(self, raw: bytes) -> Any:
        body, self.elements = self.prefix.read_body(self.scope, raw, self.key)
        return body


def endpoint_of(face: Face, route: Route, runtime: Runtime) -> Endpoint:
    """Serve ``route``: a JSON body read (``generate`` and ``body`` routes) and a concurrency slot
    leased (``generate`` routes), the exchange handed to the face, every error in the face's shape."""
    services = runtime.services
    settings = runtime.settings

    async def endpoint(request: Request) -> Response:
        request.scope["state"]["endpoint"] = route.path
        try:
            if not route.generate and not route.body:
                return await route.handler(Exchange(request, face.needs(services), runtime.ready))
            read = (Read(services.prefix, scope_of(request_tenant(request.scope), face.name), route.grows)
                    if route.grows is not None and services.prefix.enabled else None)
            body = await read_json(request, settings.max_body_bytes, settings.body_timeout, services.turns,
                                   read.parse if read is not None else orjson.loads)
            elements = read.elements if read is not None else None
            if not route.generate:
                return await route.handler(body, Exchange(request, face.needs(services), runtime.ready,
                                                          elements=elements))
            async with services.slots.lease() as lease:
                return await route.handler(body, Exchange(request, face.needs(services), runtime.ready, lease,
                                                          elements=elements))
        except APIError as exc:
            if isinstance(exc, BackendError):
                log.warning("backend error: %s", exc.message)
            return face.error_response(exc)
        except Exception:  # never a stack trace to the client
            log.exception("unexpected error")
            return face.error_response(APIError(500, "internal error", "server_error", code="internal_error"))

    return Endpoint(endpoint)


def process_face(runtime: Runtime) -> Face:
    """The process's own routes: liveness, readiness, health, models, metrics (OpenAI's error shape)."""
    services = runtime.services

    def store_state() -> str:
        """The store as its background check last found it (never a store round trip)."""
        return services.store_state() or "none"

    async def backend_state() -> tuple[bool, str]:
        try:
            model = await runtime.ready()
        except APIError as exc:
            return False, exc.message
        if model.problem is not None:  # a configuration that can answer no chat is not ready
            return False, model.problem
        return (True, "ok") if await model.backend.health() else (False, "backend is not answering")

    async def livez(ex: Exchange[Any]) -> Response:
        """Alive: the process answers (never depends on the backend or the store)."""
        return JSONResponse({"status": "ok"})

    async def readyz(ex: Exchange[Any]) -> Response:
        """Ready for traffic: the backend answers, the model can be answered with and the replica is
        not draining (why not, as ``detail``, to a caller with a key when keys are set). The store is
        reported, but does not make a replica unready (chat and ``store: false`` still work)."""
        assert ex.request is not None
        up, detail = await backend_state()
        status = "draining" if runtime.draining else "ready" if up else "unavailable"
        why = {"detail": detail} if not up and ex.request.scope.get("state", {}).get("authorized", True) else {}
        return JSONResponse({"status": status, "backend": "ok" if up else "unavailable", "store": store_state(), **why},
                            status_code=200 if status == "ready" else 503)

    async def health(ex: Exchange[Any]) -> Response:
        """Up or not (the backend answers) for anyone; which backend, model and template only with
        a key (when keys are set); the store's state."""
        assert ex.request is not None
        detailed = ex.request.scope.get("state", {}).get("authorized", True)
        up, detail = await backend_state()
        store = store_state()
        if not up:
            return JSONResponse({"status": "unavailable", "detail": detail if detailed else "backend not ready",
                                 "store": store}, status_code=503)
        return JSONResponse({"status": "ok", "store": store, **(runtime.describe() if detailed else {})})

    async def metrics(ex: Exchange[Any]) -> Response:
        return Response(services.metrics.render(), media_type=services.metrics.content_type)

    async def served_name() -> str:
        try:
            return (await runtime.ready()).name
        except APIError:  # the served name is known without the backend when --model is given
            return runtime.settings.model or "default"

    async def models(ex: Exchange[Any]) -> Response:
        return JSONResponse({"object": "list", "data": [model_object(await served_name())]})

    async def model(ex: Exchange[Any]) -> Response:
        """The served model by its id (OpenAI's 404 object for any other id)."""
        assert ex.request is not None
        model_id = ex.request.path_params["model_id"]
        name = await served_name()
        if model_id != name:
            raise APIError(404, f"The model {model_id!r} does not exist; this server serves {name!r}",
                           code="model_not_found", param="model")
        return JSONResponse(model_object(model_id))

    return Face("process", "", (
        Route("/livez", ("GET",), livez),
        Route("/readyz", ("GET",), readyz),
        Route("/health", ("GET",), health),
        Route("/metrics", ("GET",), metrics),
        Route("/v1/models", ("GET",), models),
        Route("/v1/models/{model_id:path}", ("GET",), model),
    ), openai_error)


def _lifespan(runtime: Runtime) -> Callable[[Any], AbstractAsyncContextManager[None]]:
    @asynccontextmanager
    async def lifespan(_: Any) -> AsyncIterator[None]:
        await runtime.start()
        try:
            yield
        finally:
            await runtime.stop()

    return lifespan


def _routes(runtime: Runtime, process: Face, edge: Callable[[ASGIApp, str], ASGIApp] | None = None
            ) -> list[BaseRoute]:
    """Every face's routes and the process's, as plain ASGI routes (the faces first: the router
    tries routes in order); each wrapped by ``edge`` when given."""
    routes: list[BaseRoute] = []
    for face in (*FACES, process):
        for route in face.routes:
            endpoint: ASGIApp = endpoint_of(face, route, runtime)
            routes.append(ASGIRoute(route.path, edge(endpoint, route.path) if edge else endpoint,
                                    methods=list(route.methods), name=f"{face.name}:{route.path}"))
    return routes


#: where the OpenAPI document is served (``--openapi``)
OPENAPI_PATH = "/openapi.json"


#: the request models the OpenAPI document shows for the routes that take a body (the faces' own
#: ``protocol.py`` models, the ones their decoders validate with)
REQUEST_MODELS: dict[str, type[BaseModel]] = {
    "/v1/chat/completions": ChatCompletionRequest, "/v1/completions": CompletionRequest,
    "/v1/responses": ResponsesRequest, "/v1/messages": MessagesRequest, "/v1/messages/count_tokens": Conversation,
}


def _documented(route: Route) -> APIRoute:
    """A stand-in FastAPI route for the OpenAPI document: ``route``'s path and methods, with its
    request model as the body. Documentation only: never served."""
    model = REQUEST_MODELS.get(route.path) if "POST" in route.methods else None

    async def plain() -> None: ...

    async def with_body(body: Any) -> None: ...

    with_body.__annotations__["body"] = model  # (this module's annotations are strings)
    return APIRoute(route.path, plain if model is None else with_body, methods=list(route.methods),
                    summary=_summary(route))


def _summary(route: Route) -> str:
    doc = (route.handler.__doc__ or "").strip()
    return doc.split("\n", 1)[0].rstrip(".") if doc else f"{'/'.join(route.methods)} {route.path}"


def openapi_document(app: FastAPI, faces: Sequence[Face]) -> dict[str, Any]:
    """The OpenAPI document: toolwire's routes with their request models, then the app's own
    FastAPI routes (any you added)."""
    ours = [_documented(route) for face in faces for route in face.routes]
    return get_openapi(title=app.title, version=app.version, routes=[*ours, *app.routes],
                       description="OpenAI-compatible Chat Completions, Responses and Anthropic Messages over "
                                   "raw-completion backends")


#: FastAPI's native OpenTelemetry, all of it off (its ``telemetry`` option)
TELEMETRY_OFF = {"tracing": False, "metrics": False, "logs": False}


def native_telemetry() -> dict[str, Any]:
    """FastAPI's own constructor options for its native OpenTelemetry (FastAPI versions that have
    it): left to FastAPI's defaults where the OpenTelemetry SDK is installed (what configures a
    provider, ``opentelemetry-instrument`` included), off where it is not — toolwire's own install,
    where FastAPI brings only the API and no provider can be configured — which spares every request
    FastAPI's look at the three global providers (6.5 µs warm, on the first token's path)."""
    if "telemetry" not in inspect.signature(FastAPI.__init__).parameters:
        return {}
    return {} if importlib.util.find_spec("opentelemetry.sdk") is not None else {"telemetry": TELEMETRY_OFF}


def create_app(settings: Settings, runtime: Runtime | None = None) -> FastAPI:
    """toolwire as a FastAPI app (see the module docstring)."""
    runtime = runtime or Runtime(settings)
    app = FastAPI(title="toolwire", lifespan=_lifespan(runtime), docs_url=None, redoc_url=None,
                  openapi_url=OPENAPI_PATH if settings.openapi else None, **native_telemetry())
    app.state.runtime = runtime
    process = process_face(runtime)
    app.router.routes.extend(_routes(runtime, process))

    def openapi() -> dict[str, Any]:  # FastAPI's documented way to shape the document: replace app.openapi
        if app.openapi_schema is None:
            app.openapi_schema = openapi_document(app, (*FACES, process))
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]

    async def http_error(request: Request, exc: Exception) -> Response:
        """A path or method no route serves (404, 405), in the shape of the face the path belongs to."""
        assert isinstance(exc, StarletteHTTPException)
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code)
        kind = "invalid_request_error" if exc.status_code < 500 else "server_error"
        message = (f"{request.method} {request.url.path} is not served here" if exc.status_code in (404, 405)
                   else str(exc.detail))
        return face_for(_route_path(request.scope), FACES, process).error_response(
            APIError(exc.status_code, message, kind, code=code, headers=dict(exc.headers or {})))

    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_middleware(EdgeMiddleware, settings=settings, metrics=runtime.services.metrics, faces=FACES,
                       default=process)
    if settings.cors_origins:  # outside the edge: preflights are answered, and refusals carry its headers
        app.add_middleware(CORSMiddleware, allow_origins=settings.cors_origins, allow_methods=["*"],
                           allow_headers=["*"], expose_headers=["X-Request-ID"])
    return app


def create_router(settings: Settings, runtime: Runtime | None = None) -> APIRouter:
    """toolwire's routes as an ``APIRouter`` for ``app.include_router`` in a FastAPI app of yours:
    each route behind the edge (auth, request ids, metrics, access log), the router's lifespan
    starting and stopping toolwire (FastAPI runs an included router's lifespan with the app's).
    Paths the routes do not serve are your app's (its 404s, its CORS)."""
    runtime = runtime or Runtime(settings)
    process = process_face(runtime)
    metrics = runtime.services.metrics

    def edge(endpoint: ASGIApp, path: str) -> ASGIApp:
        return EdgeMiddleware(endpoint, settings=settings, metrics=metrics, faces=FACES, default=process, route=path)

    router = APIRouter(lifespan=_lifespan(runtime))
    router.routes.extend(_routes(runtime, process, edge))
    return router


def app_from_env() -> FastAPI:
    """uvicorn factory for worker processes: settings from ``TOOLWIRE_*``."""
    from app.allocator import tune
    from app.logs import configure

    settings = Settings()
    configure(settings.log_level)
    tune()  # the allocator's thresholds: this worker serves (``app.allocator``)
    http_protocol(settings)  # the head's bounds are the protocol class's: set them in this process too
    return create_app(settings)


__all__ = ["FACES", "create_app", "create_router", "read_json", "uvicorn_options"]
