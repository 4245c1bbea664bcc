"""Process-wide state: the pooled HTTP client, the backend, the chat template, the parser choice.

The backend may come up after toolwire (a sidecar starting beside its model server), so probing
it — type, model name, template — is retried until it succeeds: at start-up (briefly), by
``/health`` and by requests. Parser names are validated before anything starts.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import httpx

from app.backends import BACKEND_TYPES, Backend, detect_backend_type
from app.backends.streamhttp import StreamingClient
from app.errors import APIError
from app.metrics import Metrics
from app.parser_choice import ParserChoice
from app.pipeline.offload import Offloader
from app.pipeline.plan import Formats
from app.sched import set_slice
from app.settings import Settings
from app.state import ResponseStore, open_store
from app.templates.chat_template import ChatTemplate, TemplateError
from app.templates.prompt import profile_of
from parsers.registry import (
    canonical_reasoning_parser,
    canonical_tool_parser,
)

log = logging.getLogger("toolwire")


class ParserConfigError(ValueError):
    """A parser that cannot be set up as configured (``response-schema`` without a schema)."""


def validate_parser_names(settings: Settings) -> None:
    """Raise ``UnknownParserError`` (listing the known names) for a name that is not registered,
    and ``ParserConfigError`` when ``response-schema`` has no schema to use."""
    if settings.reasoning_parser and settings.reasoning_parser != "auto":
        canonical_reasoning_parser(settings.reasoning_parser)
    if settings.tool_call_parser == "response-schema":
        response_schema_parser(settings)
    elif settings.tool_call_parser and settings.tool_call_parser != "auto":
        canonical_tool_parser(settings.tool_call_parser)


def response_schema_parser(settings: Settings) -> type:
    """The ``response-schema`` detector class for the configured schema: ``--response-schema``
    (a schema or a ``tokenizer_config.json``), else the chat template's ``tokenizer_config.json``."""
    from detectors.tools.response_schema import ResponseSchema, load_response_schema

    source = settings.response_schema or settings.chat_template
    if source is None:
        raise ParserConfigError("--tool-call-parser response-schema needs --response-schema FILE, or a "
                                "--chat-template tokenizer_config.json (or model directory) with a response_schema")
    try:
        schema = load_response_schema(source)
    except (OSError, ValueError) as exc:
        raise ParserConfigError(f"--tool-call-parser response-schema: {exc}") from exc
    return ResponseSchema.with_schema(schema, label=f"response-schema({source.name})")


class Slots:
    """A bounded number of concurrent requests (``--max-concurrency``); unbounded when ``None``."""

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self.used = 0

    def try_acquire(self) -> Callable[[], None] | None:
        """A release function (safe to call more than once), or ``None`` when all slots are taken."""
        if self.limit is not None and self.used >= self.limit:
            return None
        self.used += 1
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                self.used -= 1

        return release


class Runtime:
    def __init__(self, settings: Settings) -> None:
        validate_parser_names(settings)
        self.settings = settings
        self.client: httpx.AsyncClient | None = None
        self.streaming: StreamingClient | None = None
        self.backend: Backend | None = None
        self.template: ChatTemplate | None = None
        self.model_name: str = settings.model or "default"
        self._parsers = ParserChoice()
        self.responses: ResponseStore | None = None  # stored Responses API responses (opened at start)
        self.offloader = Offloader(2, settings.max_render_ms / 1000, max_jobs=8)
        self.formats = Formats()
        self.metrics = Metrics()
        self.slots = Slots(settings.max_concurrency)
        self._prepared = False
        self._lock = asyncio.Lock()

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        s = self.settings
        if s.sched_slice_us is not None:
            problem = set_slice(s.sched_slice_us)
            if problem is None:
                log.info("scheduler slice set to %d µs", s.sched_slice_us)
            else:
                log.warning("scheduler slice not set: %s", problem)
        timeout = httpx.Timeout(connect=s.connect_timeout, read=s.read_timeout, write=30.0, pool=s.connect_timeout)
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=256, keepalive_expiry=30)
        self.client = httpx.AsyncClient(timeout=timeout, limits=limits)
        self.streaming = StreamingClient(s.connect_timeout, s.read_timeout)
        self.responses = open_store(s)
        if s.chat_template is not None:
            self.template = ChatTemplate.load(s.chat_template)
        try:
            await asyncio.wait_for(self.prepare(), timeout=max(5.0, s.connect_timeout))
        except (TimeoutError, APIError, httpx.HTTPError) as exc:
            log.warning("backend not ready at start-up (%s); will retry on demand", exc)

    async def stop(self) -> None:
        self.offloader.close()
        if self.responses is not None:
            await self.responses.close()
        if self.client is not None:
            await self.client.aclose()
        if self.streaming is not None:
            await self.streaming.close()

    @property
    def parsers(self) -> ParserChoice:
        """The parsers in use; setting them resolves ``formats`` (once, not per request)."""
        return self._parsers

    @parsers.setter
    def parsers(self, choice: ParserChoice) -> None:
        self._parsers = choice
        self.formats = Formats.of(choice)

    @property
    def prepared(self) -> bool:
        return self._prepared

    async def prepare(self) -> None:
        """Probe the backend once it answers: type, model names, template, parser choice."""
        if self._prepared:
            return
        async with self._lock:
            if self._prepared:
                return
            s = self.settings
            if not s.backend:
                raise APIError(503, "no backend configured (--backend or --local-model)", "server_error")
            assert self.client is not None
            api_key = s.backend_api_key.get_secret_value() if s.backend_api_key else None
            kind = s.backend_type or await detect_backend_type(s.backend, self.client, api_key)
            if kind is None:
                raise APIError(503, f"backend {s.backend} is not answering", "server_error", code="backend_unreachable")
            backend = Backend(s.backend, self.client, api_key, s.model, self.streaming,
                              BACKEND_TYPES[kind].configured(s))
            facts = await backend.probe()
            if self.template is None and facts.template is not None:
                published = facts.template
                self.template = ChatTemplate(published.source, published.bos_token, published.eos_token,
                                             name="backend /props")
            if self.template is not None:
                profile_of(self.template)  # probe it now, not on the first request
            self.model_name = s.model or served_name(facts.model) or "default"
            self.parsers = self._choose_parsers()
            self.backend = backend
            self._prepared = True
            log.info("backend ready: %s (%s), model %s, parsers reasoning=%s tools=%s", s.backend, kind,
                     self.model_name, self.parsers.reasoning, self.parsers.tools)

    def _choose_parsers(self) -> ParserChoice:
        s = self.settings
        choice = ParserChoice()
        wants_auto = "auto" in (s.reasoning_parser, s.tool_call_parser)
        auto = self._auto_parsers() if wants_auto else None
        if s.reasoning_parser == "auto":
            choice.reasoning = auto.reasoning if auto else None
            choice.why["reasoning"] = auto.why.get("reasoning", "") if auto else ""
        elif s.reasoning_parser:
            choice.reasoning = canonical_reasoning_parser(s.reasoning_parser)
            choice.why["reasoning"] = "--reasoning-parser"
        if s.tool_call_parser == "auto":
            choice.tools = auto.tools if auto else None
            choice.why["tools"] = auto.why.get("tools", "") if auto else ""
        elif s.tool_call_parser == "response-schema":
            choice.tools = response_schema_parser(s)
            choice.why["tools"] = f"--tool-call-parser response-schema ({s.response_schema or s.chat_template})"
        elif s.tool_call_parser:
            choice.tools = canonical_tool_parser(s.tool_call_parser)
            choice.why["tools"] = "--tool-call-parser"
        return choice

    def _auto_parsers(self) -> ParserChoice | None:
        """What ``auto`` learns from the chat template (``app.templates.autodetect``); ``None`` without one."""
        if self.template is None:
            log.warning("parser auto: no chat template to learn from; not parsing")
            return None
        from app.templates.autodetect import choose_parsers

        try:
            choice = choose_parsers(self.template.source)
        except Exception:  # the analysis must never keep the server from starting
            log.exception("parser auto: template analysis failed; not parsing")
            return ParserChoice(why={"reasoning": "template analysis failed", "tools": "template analysis failed"})
        for kind in ("reasoning", "tools"):
            log.info("parser auto (%s): %s", kind, choice.why.get(kind, ""))
        return choice

    # ------------------------------------------------------------------ per request helpers

    async def ready_backend(self) -> Backend:
        if not self._prepared:
            try:
                await self.prepare()
            except httpx.HTTPError as exc:
                raise APIError(503, f"backend not ready: {type(exc).__name__}", "server_error",
                               code="backend_unreachable") from exc
        assert self.backend is not None
        return self.backend

    def require_template(self) -> ChatTemplate:
        if self.template is None:
            raise APIError(500, "no chat template: pass --chat-template (the backend does not publish one)",
                           "server_error", code="no_chat_template")
        return self.template

    def marker_tokens(self, tools_active: bool) -> tuple[str, ...]:
        """Marker strings the backend must keep as text for the active parsers."""
        return self.formats.markers(tools_active)

    def describe(self) -> dict[str, Any]:
        def label(parser: str | type | None) -> str | None:
            return parser if parser is None or isinstance(parser, str) else getattr(parser, "label", parser.__name__)

        return {
            "backend": self.settings.backend,
            "backend_type": self.backend.kind if self.backend else None,
            "model": self.model_name,
            "reasoning_parser": label(self.parsers.reasoning),
            "tool_call_parser": label(self.parsers.tools),
            "template": self.template.name if self.template else None,
        }


def served_name(upstream: str | None) -> str | None:
    """The name to serve for a backend's model id: llama-server reports the GGUF path, which
    becomes its file name (``/models/SmolLM2-135M-Instruct.Q4_1.gguf`` → ``SmolLM2-135M-Instruct.Q4_1``)."""
    if upstream and upstream.endswith(".gguf") and "/" in upstream:
        return upstream.rsplit("/", 1)[1][: -len(".gguf")]
    return upstream


def render_error(exc: TemplateError) -> APIError:
    return APIError(400, f"chat template rejected the request: {exc}", code="template_error")
