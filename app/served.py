"""The model this server answers for, as learned from its backend: ``ServedModel`` (immutable) and
how it is found (``probe``).

The backend may come up after toolwire (a sidecar starting beside its model server), so probing it
— type, model name, template, context length — is retried until it succeeds (``app.runtime``);
parser names are validated before anything starts (``validate_parser_names``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx

from app.backends import BACKEND_TYPES, Backend, detect_backend_type
from app.backends.streamhttp import StreamingClient
from app.control import control_for
from app.errors import APIError
from app.formats import Formats, label_of
from app.parser_choice import ParserChoice
from app.settings import Settings
from app.templates.chat_template import ChatTemplate
from app.templates.literal import ControlText
from app.templates.prompt import profile_of
from parsers.registry import canonical_reasoning_parser, canonical_tool_parser

if TYPE_CHECKING:
    from app.vocab import TextTokenizer

log = logging.getLogger("toolwire")
#: client text sent as it is (a model served without ``app.control.control_for``: tests, tools)
NO_CONTROL = ControlText(mode="allow")


class ParserConfigError(ValueError):
    """A parser that cannot be set up as configured (``response-schema`` without a schema)."""


class NoTemplateError(ValueError):
    """A configuration that can answer no chat: a backend kind that publishes no chat template, and
    no ``--chat-template``."""


#: how to give toolwire a chat template, in every message that asks for one
TEMPLATE_HOW = "pass --chat-template (a .jinja file, a tokenizer_config.json or the model's directory)"


def no_template(kind: str) -> str:
    """Why a server on a backend of ``kind`` without a chat template answers no chat."""
    return f"no chat template: the {kind} backend publishes none; {TEMPLATE_HOW}"


def validate_template_source(settings: Settings) -> None:
    """Raise ``NoTemplateError`` when the chat template can come from nowhere: ``--backend-type``
    names a kind that publishes none, and there is no ``--chat-template``. (A kind that is detected
    after start is checked then: the server stays not-ready, see ``ServedModel.problem``.)"""
    kind = settings.backend_type
    if settings.chat_template is None and kind is not None and not BACKEND_TYPES[kind].publishes_template:
        raise NoTemplateError(f"--backend-type {kind} publishes no chat template: {TEMPLATE_HOW}")


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


def choose_parsers(settings: Settings, template: ChatTemplate | None) -> ParserChoice:
    """The parsers to run: the named ones, or what ``auto`` learns from ``template``."""
    s = settings
    choice = ParserChoice()
    wants_auto = "auto" in (s.reasoning_parser, s.tool_call_parser)
    auto = _auto_parsers(template) if wants_auto else None
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


def _auto_parsers(template: ChatTemplate | None) -> ParserChoice | None:
    """What ``auto`` learns from the chat template (``app.templates.autodetect``); ``None`` without one."""
    if template is None:
        log.warning("parser auto: no chat template to learn from; not parsing")
        return None
    from app.templates.autodetect import choose_parsers as learn

    try:
        choice = learn(template.source)
    except Exception:  # the analysis must never keep the server from starting
        log.exception("parser auto: template analysis failed; not parsing")
        return ParserChoice(why={"reasoning": "template analysis failed", "tools": "template analysis failed"})
    for kind in ("reasoning", "tools"):
        log.info("parser auto (%s): %s", kind, choice.why.get(kind, ""))
    return choice


@dataclass(frozen=True)
class ServedModel:
    """The model requests are answered with: its name on ``/v1/models``, the backend that runs it,
    its chat template (``None``: none known), the parsers chosen and the formats they resolve to,
    what is done with client text holding control tokens (``app.pipeline.literal``) and the model's
    tokenizer in process, where there is one (never sent to worker processes)."""

    name: str
    backend: Backend
    template: ChatTemplate | None
    parsers: ParserChoice
    formats: Formats
    control: ControlText = NO_CONTROL
    tokenizer: TextTokenizer | None = None

    @classmethod
    def of(cls, name: str, backend: Backend, template: ChatTemplate | None, parsers: ParserChoice,
           control: ControlText | None = None, tokenizer: TextTokenizer | None = None) -> ServedModel:
        return cls(name, backend, template, parsers, Formats.of(parsers), control or NO_CONTROL,
                   tokenizer)

    @property
    def problem(self) -> str | None:
        """Why this model can answer no chat (readiness says so), or ``None``."""
        return no_template(self.backend.kind) if self.template is None else None

    def require_template(self) -> ChatTemplate:
        """The chat template; a 503 saying how to configure one when there is none."""
        if self.template is None:
            raise APIError(503, no_template(self.backend.kind), "server_error", code="no_chat_template")
        return self.template

    def marker_tokens(self, tools_active: bool) -> tuple[str, ...]:
        """Marker strings the backend must keep as text for the active parsers."""
        return self.formats.markers(tools_active)

    def describe(self, backend_url: str | None) -> dict[str, Any]:
        return {
            "backend": backend_url,
            "backend_type": self.backend.kind,
            "model": self.name,
            "reasoning_parser": _label(self.parsers.reasoning),
            "tool_call_parser": _label(self.parsers.tools),
            "template": self.template.name if self.template else None,
        }


def _label(parser: str | type | None) -> str | None:
    return None if parser is None else label_of(parser)


async def probe(settings: Settings, client: httpx.AsyncClient, streaming: StreamingClient | None,
                template: ChatTemplate | None) -> ServedModel:
    """Ask the backend what it serves (``APIError`` 503 when there is none, or it does not answer)."""
    s = settings
    if not s.backend:
        raise APIError(503, "no backend configured (--backend or --local-model)", "server_error")
    api_key = s.backend_api_key.get_secret_value() if s.backend_api_key else None
    kind = s.backend_type or await detect_backend_type(s.backend, client, api_key)
    if kind is None:
        raise APIError(503, f"backend {s.backend} is not answering", "server_error", code="backend_unreachable")
    backend = Backend(s.backend, client, api_key, s.model, streaming, BACKEND_TYPES[kind].configured(s))
    facts = await backend.probe()
    upstream_model = facts.model
    if template is None and facts.template is not None:
        published = facts.template
        template = ChatTemplate(published.source, published.bos_token, published.eos_token, name="backend /props")
    if template is not None:
        profile_of(template)  # probe it now, not on the first request
        if s.prefix_cache_bytes:
            template.loop_plan()  # proven now, not on the first request (a parse and a compile)
    control, tokenizer = await control_for(s, backend, template)
    model = ServedModel.of(s.model or served_name(upstream_model) or "default", backend, template,
                           choose_parsers(s, template), control, tokenizer)
    if model.problem is not None:
        log.error("!!! %s — not ready: /readyz is 503 and every chat request answers 503 until restarted with one",
                  model.problem)
    log.info("backend ready: %s (%s), model %s, parsers reasoning=%s tools=%s", s.backend, kind, model.name,
             model.parsers.reasoning, model.parsers.tools)
    return model


def served_name(upstream: str | None) -> str | None:
    """The name to serve for a backend's model id: llama-server reports the GGUF path, which
    becomes its file name (``/models/SmolLM2-135M-Instruct.Q4_1.gguf`` → ``SmolLM2-135M-Instruct.Q4_1``)."""
    if upstream and upstream.endswith(".gguf") and "/" in upstream:
        return upstream.rsplit("/", 1)[1][: -len(".gguf")]
    return upstream
