"""The dialect of llama.cpp's ``llama-server``: ``POST /completion`` (its native streaming API).

Images (llama.cpp's ``tools/server/README.md``, ``/completion``): the prompt is then a JSON object,
``{"prompt_string": …, "multimodal_data": ["<base64>", …]}``, whose string holds one media marker per
item, substituted in order. The marker is the server's own (``/props`` ``media_marker``: a random
``<__media_…__>`` per process since late 2025, ``mtmd_default_marker()``'s ``<__media__>`` before),
and ``/props`` ``modalities`` says whether the loaded model takes images at all (``--mmproj``). That
object prompt is one string, tokenized with special tokens parsed: token-id prompts cannot carry
images.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from app.backends.dialect import (
    BackendFacts,
    Dialect,
    Events,
    MediaInput,
    PieceCarry,
    Probe,
    PublishedTemplate,
    Tokenizer,
    count,
    drop_none,
    first_model,
    first_model_id,
    logprob_value,
    positive_int,
    unexpected_shape,
    utf8,
)
from app.backends.generation import Finish, GenerationRequest, TextDelta, TokenLogprob, TokenPiece, Usage
from app.constraints.tools import Constraint, ConstraintRequest, llamacpp_constraint
from app.errors import BackendError

#: the marker of llama-servers whose ``/props`` names none (``mtmd_default_marker()``)
DEFAULT_MEDIA_MARKER = "<__media__>"
#: what llama-server's image loader decodes (stb_image; WebP only in builds with FFmpeg, which /props does not tell)
LLAMACPP_IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/bmp"})


def reasoning_budget_fields(request: GenerationRequest) -> dict[str, Any]:
    """llama-server's reasoning-budget sampler: the budget, the block's markers (it counts tokens
    between them and forces the end marker when the budget is spent), armed at once when the prompt
    already opened the block. Nothing without a budget or without a reasoning format."""
    gate = request.reasoning
    if request.reasoning_budget is None or gate is None:
        return {}
    return {"reasoning_budget_tokens": request.reasoning_budget, "reasoning_budget_start_tag": gate.start,
            "reasoning_budget_end_tag": gate.end, "reasoning_budget_arm_immediately": gate.inside}


def token_probabilities(data: Any, top: int) -> list[TokenLogprob]:
    """The tokens of one streamed event from llama-server's ``completion_probabilities``, with the
    ``top`` most likely alternatives of each. llama-server reports natural-log ``logprob`` /
    ``top_logprobs`` by default, and probabilities (``prob`` / ``top_probs``, after sampling) when
    asked for ``post_sampling_probs``: those are turned into logprobs."""
    if data is None:
        return []
    if not isinstance(data, list):
        raise unexpected_shape('"completion_probabilities" is not a list')
    out = []
    for entry in data:
        token = _token(entry)
        alternatives = entry.get("top_logprobs", entry.get("top_probs"))
        best = [_token(option) for option in alternatives[:top]] if top and isinstance(alternatives, list) else []
        out.append(TokenLogprob(token.token, token.logprob, token.bytes, best))
    return out


def _token(entry: Any) -> TokenLogprob:
    if not isinstance(entry, dict) or not isinstance(entry.get("token"), str):
        raise unexpected_shape('a "completion_probabilities" entry without a "token" string')
    token: str = entry["token"]
    if "logprob" in entry:
        value = logprob_value(entry["logprob"])
    else:
        prob = entry.get("prob")
        positive = isinstance(prob, (int, float)) and not isinstance(prob, bool) and prob > 0
        value = logprob_value(math.log(float(prob)) if positive else None)  # type: ignore[arg-type]
    raw = entry.get("bytes")
    data = raw if isinstance(raw, list) and all(isinstance(b, int) and 0 <= b < 256 for b in raw) else utf8(token)
    return TokenLogprob(token, value, data)


@dataclass(frozen=True)
class LlamaCpp(Dialect):
    """llama-server's native API: special tokens kept where ``preserved_tokens`` lists them, GBNF
    constraints, its reasoning-budget sampler, prompt caching; it publishes its chat template and
    context size on ``/props``."""

    kind: ClassVar[str] = "llamacpp"
    path: ClassVar[str] = "/completion"
    #: ``/completion`` parses special tokens and adds BOS where the model adds one: counted alike
    tokenizer: ClassVar[Tokenizer | None] = Tokenizer(
        "/tokenize", "content", counting={"add_special": True, "parse_special": True},
        plain={"add_special": False, "parse_special": False}, special={"add_special": False, "parse_special": True})
    sniff: ClassVar[str | None] = "/props"
    publishes_template: ClassVar[bool] = True
    probes: ClassVar[tuple[Probe, ...]] = (
        Probe("models", "/v1/models"),
        Probe("props", "/props"),
        # does an empty prompt get a BOS token? (then the template's own BOS text must not be sent too)
        Probe("bos", "/tokenize", {"content": "", "add_special": True}),
    )

    @staticmethod
    def recognises(answer: Any) -> bool:
        """llama-server answers ``GET /props`` with its settings."""
        return isinstance(answer, dict) and "default_generation_settings" in answer

    def constrain(self, request: ConstraintRequest) -> Constraint:
        return llamacpp_constraint(request)

    def media(self, facts: BackendFacts) -> MediaInput:
        """Images as the server's media marker in the prompt, their bytes beside it; what the model
        takes from ``/props`` (a server that does not say is taken to take none: the marker would
        reach a text-only model as text)."""
        return MediaInput(facts.media_marker or DEFAULT_MEDIA_MARKER, LLAMACPP_IMAGE_TYPES,
                          facts.modalities if facts.modalities is not None else frozenset(), "llama-server")

    def body(self, request: GenerationRequest, model: str | None) -> dict[str, Any]:
        s = request.sampling
        prompt: Any = request.sent_prompt
        if request.media:  # one string (llama-server takes no token ids beside images)
            prompt = {"prompt_string": str(request.prompt),
                      "multimodal_data": [item.base64() for item in request.media]}
        return drop_none({
            "prompt": prompt,
            "stream": True,
            "n_predict": s.max_tokens if s.max_tokens is not None else -1,
            "temperature": s.temperature,
            "top_p": s.top_p,
            "top_k": s.top_k,
            "min_p": s.min_p,
            "stop": s.stop or None,
            "seed": s.seed,
            "presence_penalty": s.presence_penalty,
            "frequency_penalty": s.frequency_penalty,
            "repeat_penalty": s.repetition_penalty,
            "logit_bias": [[k, v] for k, v in s.logit_bias.items()] if s.logit_bias else None,
            "preserved_tokens": list(request.preserved_tokens) or None,
            "cache_prompt": True,
            # per-token probabilities (llama-server reports none for n_probs 0: ask for 1, show 0)
            "n_probs": max(request.logprobs, 1) if request.logprobs is not None else None,
            **reasoning_budget_fields(request),
            **request.constraint,
        })

    def decoder(self, request: GenerationRequest) -> CompletionDecoder:
        return CompletionDecoder(request.logprobs)

    def facts(self, answers: Mapping[str, Any]) -> BackendFacts:
        """The model id (``/v1/models``), the chat template and the slot's context size (``/props``:
        ``default_generation_settings.n_ctx``; else ``/v1/models``' ``meta.n_ctx``), what the model
        takes besides text and the media marker (``/props``: ``modalities``, ``media_marker``), and
        whether ``/tokenize`` gives an empty prompt a BOS token."""
        props = answers.get("props")
        props = props if isinstance(props, dict) else {}
        template = None
        if props.get("chat_template"):
            template = PublishedTemplate(str(props["chat_template"]), str(props.get("bos_token") or ""),
                                         str(props.get("eos_token") or ""))
        settings = props.get("default_generation_settings")
        context = positive_int(settings.get("n_ctx")) if isinstance(settings, dict) else None
        if context is None:
            meta = (first_model(answers.get("models")) or {}).get("meta")
            context = positive_int(meta.get("n_ctx")) if isinstance(meta, dict) else None
        bos = answers.get("bos")
        modalities = props.get("modalities")
        marker = props.get("media_marker")
        return BackendFacts(model=first_model_id(answers.get("models")), template=template,
                            adds_bos=isinstance(bos, dict) and bool(bos.get("tokens")), context_length=context,
                            modalities=frozenset("image" if k == "vision" else str(k) for k, v in modalities.items()
                                                 if v is True) if isinstance(modalities, dict) else None,
                            media_marker=marker if isinstance(marker, str) and marker else None)


class CompletionDecoder:
    """The events of one ``/completion`` stream: ``content`` text (with its tokens' probabilities
    when asked), the prompt's token count (``tokens_evaluated``, told with the first text), and the
    final event (``stop: true``) with the stop type, matched stop word, usage and cached tokens.
    The stream is complete with that final event; one that ends before it is a 502."""

    __slots__ = ("carry", "finish", "prompt_tokens", "stop", "told", "want")

    def __init__(self, want: int | None) -> None:
        self.want = want
        self.carry = PieceCarry()
        self.prompt_tokens: Any = None  # llama-server tells it with every token; handed on with the first delta
        self.told = False
        self.finish: Finish | None = None
        self.stop = False

    @property
    def complete(self) -> bool:
        return self.finish is not None

    def decode(self, events: Events) -> list[TextDelta]:
        texts: list[str] = []
        pieces: list[TokenPiece] = []
        want = self.want
        for data in events:
            if data is None:
                self.stop = True
                break
            text = data.get("content")
            if text:
                if not isinstance(text, str):
                    raise unexpected_shape('"content" is not a string')
                texts.append(text)
            if want is not None:
                piece = self.carry.piece(text or "", token_probabilities(data.get("completion_probabilities"), want))
                if piece is not None:
                    pieces.append(piece)
            if self.prompt_tokens is None:
                self.prompt_tokens = data.get("tokens_evaluated")
            if data.get("stop"):
                self.finish = _finish(data)
                self.stop = True
                break
        if not texts:
            return []
        delta = TextDelta("".join(texts), tokens=len(texts), pieces=pieces if want is not None else None)
        prompt_tokens = self.prompt_tokens
        if not self.told and isinstance(prompt_tokens, int) and not isinstance(prompt_tokens, bool):
            delta.prompt_tokens = prompt_tokens
            self.told = True
        return [delta]

    def end(self) -> list[Finish]:
        if self.finish is None:
            raise BackendError(502, "backend stream ended before the final event", kind="dropped")
        return [self.finish]


def _finish(data: dict[str, Any]) -> Finish:
    """The final event's finish: ``stop_type`` ``limit`` is ``length``; a ``word`` stop names its word."""
    timings = data.get("timings")
    cached = timings.get("cache_n") if isinstance(timings, dict) else None
    usage = Usage(count(data.get("tokens_evaluated")), count(data.get("tokens_predicted")),
                  cached if isinstance(cached, int) and not isinstance(cached, bool) else None)
    stop_type = data.get("stop_type")
    word = data.get("stopping_word") if stop_type == "word" else None
    return Finish("length" if stop_type == "limit" else "stop", usage, word if isinstance(word, str) and word else None)
