"""What a backend kind is, without any I/O: a ``Dialect``.

A dialect says everything that differs between raw-completion backends, as pure functions of data:

* ``path`` and ``body(request, model)`` — where a generation request goes and the JSON it sends;
* ``decoder(request)`` — a fresh ``Decoder`` that turns the stream's events into ``TextDelta`` and
  ``Finish`` items (shape checks included);
* ``constrain(request)`` — its dialect of constrained decoding (``app.constraints.tools``);
* ``probes`` and ``facts(answers)`` — what the readiness probe asks the backend and what it learns
  from the JSON answers (``BackendFacts``: model id, published chat template, whether it adds BOS,
  context length);
* ``tokenizer`` — its tokenizer endpoint, as data (``Tokenizer``; ``None``: it has none);
* ``sniff`` and ``recognises(answer)`` — how ``detect_backend_type`` tells it from the others.

``app.backends.base.Backend`` does the I/O for every dialect: one streaming loop, one probe, one
tokenizer exchange, one error mapping. Dialects are frozen dataclasses; their options
(``--vllm-legacy-guided``) come from ``configured(settings)``. What reading a backend's events takes
in every dialect — shape errors, counts, logprobs, tokens carried to the next piece — is here too, so
a dialect's module never imports the I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from app.backends.generation import Finish, GenerationRequest, TextDelta, TokenLogprob, TokenPiece
from app.constraints.tools import Constraint, ConstraintRequest, unconstrained
from app.errors import BackendError


class DialectOptions(Protocol):
    """The settings a dialect may be configured from (``app.settings.Settings`` has them)."""

    vllm_legacy_guided: bool


#: one network read's events: each ``data:`` payload, ``None`` for ``[DONE]``
Events = list[dict[str, Any] | None]


@dataclass(frozen=True, slots=True)
class PublishedTemplate:
    """A chat template the backend publishes (llama-server ``/props``)."""

    source: str
    bos_token: str = ""
    eos_token: str = ""


@dataclass(frozen=True, slots=True)
class BackendFacts:
    """What the readiness probe learned about the backend (all optional: a backend may not say)."""

    #: the first model id it serves (``/v1/models``)
    model: str | None = None
    template: PublishedTemplate | None = None
    #: it adds a BOS token to a prompt itself (so the template's own BOS text must not be sent too)
    adds_bos: bool = False
    #: tokens one sequence may hold, prompt and output together (llama-server: the slot's ``n_ctx``;
    #: vLLM: ``max_model_len``)
    context_length: int | None = None
    #: what the model takes besides text (llama-server ``/props`` ``modalities``: ``image``, ``audio``,
    #: ``video``); ``None``: the backend does not say
    modalities: frozenset[str] | None = None
    #: the text that stands for one media item in a prompt (llama-server ``/props`` ``media_marker``)
    media_marker: str | None = None


@dataclass(frozen=True, slots=True)
class MediaInput:
    """How a backend takes a request's images: ``marker`` — each image is this text in the prompt, its
    bytes sent beside it (llama-server), or ``None`` — the chat template's own placeholder stays in the
    prompt and the backend's processor finds it (vLLM); ``types`` the image types it decodes;
    ``modalities`` what the served model takes (``None``: unknown, the backend decides); ``why_not``
    names the backend in refusals."""

    marker: str | None
    types: frozenset[str]
    modalities: frozenset[str] | None = None
    name: str = "this backend"


@dataclass(frozen=True, slots=True)
class Probe:
    """One request of the readiness probe: ``GET path``, or ``POST path`` with ``body``. Its answer
    reaches ``Dialect.facts`` under ``name`` (``None`` when it failed or was not JSON)."""

    name: str
    path: str
    body: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Tokenizer:
    """A backend's tokenizer endpoint: ``POST path`` with a JSON object — the model id under
    ``"model"`` where ``names_model`` (and it is known), the text under ``text_field``, then
    ``counting``'s fields, which count a prompt as a generation request's prompt is counted, or
    ``plain``'s, which tokenize text as plain text: control-token strings not parsed, no BOS — or
    ``special``'s: control-token strings parsed, no BOS (``None``: it cannot). The answer holds the
    ids under ``"tokens"``; ``count_field`` names a field holding their number, read first where the
    backend sends it."""

    path: str
    text_field: str
    counting: Mapping[str, bool]
    plain: Mapping[str, bool] | None = None
    special: Mapping[str, bool] | None = None
    names_model: bool = False
    count_field: str | None = None


class Decoder(Protocol):
    """The stream of one generation request, decoded (stateful; one per request).

    ``decode(events)`` takes what one network read brought and returns the text it holds (one
    ``TextDelta`` per answer that got text); ``stop`` says the stream's last event was seen (read no
    further); ``complete`` says the backend finished the stream properly (its connection may be
    reused). ``end()``, once the stream is over, returns one ``Finish`` per answer, or raises the
    dialect's "ended without a finish" ``BackendError``."""

    @property
    def stop(self) -> bool: ...

    @property
    def complete(self) -> bool: ...

    def decode(self, events: Events) -> list[TextDelta]: ...

    def end(self) -> list[Finish]: ...


@dataclass(frozen=True)
class Dialect:
    """A backend kind (see the module docstring). The base speaks no generation API; it reads the
    model id from ``/v1/models`` and constrains nothing."""

    kind: ClassVar[str] = "base"
    #: the streaming generation endpoint
    path: ClassVar[str] = ""
    #: generates ``n`` answers in one request (else toolwire sends ``n`` requests)
    native_n: ClassVar[bool] = False
    probes: ClassVar[tuple[Probe, ...]] = (Probe("models", "/v1/models"),)
    #: the backend's tokenizer endpoint (``None``: it has none)
    tokenizer: ClassVar[Tokenizer | None] = None
    #: the backend may publish the model's chat template (``facts``); without it, ``--chat-template`` is needed
    publishes_template: ClassVar[bool] = False
    #: what ``detect_backend_type`` GETs to recognise this kind (``None``: the fallback kind)
    sniff: ClassVar[str | None] = None

    @classmethod
    def configured(cls, settings: DialectOptions) -> Dialect:
        """The dialect with its options from the settings (the base has none)."""
        return cls()

    @staticmethod
    def recognises(answer: Any) -> bool:
        """Whether the JSON the backend answered on ``sniff`` is this kind's."""
        return False

    def body(self, request: GenerationRequest, model: str | None) -> dict[str, Any]:
        """The upstream JSON of a generation request (``model``: the backend's model id, if known)."""
        raise NotImplementedError(f"backend kind {self.kind!r} speaks no generation API")

    def decoder(self, request: GenerationRequest) -> Decoder:
        raise NotImplementedError(f"backend kind {self.kind!r} speaks no generation API")

    def constrain(self, request: ConstraintRequest) -> Constraint:
        """This backend's dialect of constrained decoding; the base speaks none (``required`` is
        then best effort)."""
        return unconstrained(request)

    def media(self, facts: BackendFacts) -> MediaInput | None:
        """How this backend takes images (``None``: it takes none — the base takes none)."""
        return None

    def route(self, request: GenerationRequest) -> str:
        """Where ``request`` goes (``path``, unless a dialect sends some requests elsewhere)."""
        return self.path

    def facts(self, answers: Mapping[str, Any]) -> BackendFacts:
        """What the probe's answers say (by ``Probe.name``); the base reads the model id."""
        return BackendFacts(model=first_model_id(answers.get("models")))


def first_model(answer: Any) -> dict[str, Any] | None:
    """The first entry of an OpenAI ``/v1/models`` answer's ``data`` list, if it is an object."""
    data = answer.get("data") if isinstance(answer, dict) else None
    if isinstance(data, list) and data and isinstance(data[0], dict):
        return data[0]
    return None


def first_model_id(answer: Any) -> str | None:
    """The first model id of an OpenAI ``/v1/models`` answer (``None`` if it does not say)."""
    model = first_model(answer)
    return str(model["id"]) if model is not None and model.get("id") is not None else None


def positive_int(value: Any) -> int | None:
    """``value`` if it is a positive integer (not a bool), else ``None``."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def drop_none(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` without its ``None`` fields (what a request leaves unset is not sent)."""
    return {k: v for k, v in body.items() if v is not None}


# ------------------------------------------------------------------------- reading a stream's events


def unexpected_shape(what: str) -> BackendError:
    """A backend event whose JSON is not the dialect's shape (a 502, or the stream's final error event)."""
    return BackendError(502, f"backend sent an event of an unexpected shape: {what}", kind="bad_shape")


def count(value: Any) -> int:
    """A token count from a backend event: a non-negative integer, else 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def logprob_value(value: Any) -> float:
    """A logprob from a backend event: a number, at least -9999.0 (OpenAI's stand-in for minus
    infinity, which JSON cannot carry); anything else counts as that floor."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and not math.isnan(value):
        return max(float(value), -9999.0)
    return -9999.0


def utf8(token: str) -> list[int]:
    """A token's UTF-8 bytes (text a backend could not decode carries U+FFFD, encoded as such)."""
    return list(token.encode("utf-8", "replace"))


class PieceCarry:
    """Hands tokens that produced no text of their own (half a character, a stop-string prefix the
    backend held back) on to the next piece that has text."""

    __slots__ = ("held",)

    def __init__(self) -> None:
        self.held: list[TokenLogprob] = []

    def piece(self, text: str, tokens: list[TokenLogprob]) -> TokenPiece | None:
        if not text:
            self.held += tokens
            return None
        if self.held:
            tokens, self.held = self.held + tokens, []
        return text, tokens
