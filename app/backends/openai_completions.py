"""The dialect of OpenAI-style ``POST /v1/completions`` backends (generic ones; vLLM extends it)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from app.backends.dialect import (
    BackendFacts,
    Dialect,
    Events,
    PieceCarry,
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
from app.errors import BackendError


@dataclass(frozen=True)
class OpenAICompletions(Dialect):
    """Any OpenAI-compatible ``POST /v1/completions`` API. Special tokens and constraints are up to it."""

    kind: ClassVar[str] = "openai"
    path: ClassVar[str] = "/v1/completions"

    def body(self, request: GenerationRequest, model: str | None) -> dict[str, Any]:
        s = request.sampling
        return drop_none({
            "model": model,
            "prompt": request.sent_prompt,
            "stream": True,
            "stream_options": {"include_usage": True},
            "max_tokens": s.max_tokens,
            "temperature": s.temperature,
            "top_p": s.top_p,
            "stop": s.stop or None,
            "seed": s.seed,
            "presence_penalty": s.presence_penalty,
            "frequency_penalty": s.frequency_penalty,
            "logit_bias": {str(k): v for k, v in s.logit_bias.items()} if s.logit_bias else None,
            "logprobs": request.logprobs,
            "n": request.n if self.native_n and request.n > 1 else None,
            **request.constraint,
        })

    def decoder(self, request: GenerationRequest) -> CompletionsDecoder:
        return CompletionsDecoder(request.n if self.native_n else 1, request.logprobs)

    def facts(self, answers: Mapping[str, Any]) -> BackendFacts:
        """The model id and, where the server says it (vLLM, SGLang), ``max_model_len`` from ``/v1/models``."""
        models = answers.get("models")
        first = first_model(models)
        return BackendFacts(model=first_model_id(models),
                            context_length=positive_int(first.get("max_model_len")) if first else None)


class CompletionsDecoder:
    """The events of one ``/v1/completions`` stream: each choice's text (by ``index`` when ``n`` > 1,
    with its tokens' logprobs when asked), its finish reason and matched stop string (vLLM's
    ``stop_reason``), the usage (the latest seen; with ``n`` > 1, the latest beside each choice's text);
    the first text of each choice carries the prompt's token count when a usage told it already.
    ``[DONE]`` ends the stream; it is complete once every choice has its finish reason."""

    __slots__ = ("carries", "choice_usage", "last_usage", "n", "reasons", "stop", "stop_strings", "told", "want")

    def __init__(self, n: int, want: int | None) -> None:
        self.n = n
        self.want = want
        self.reasons: dict[int, str] = {}
        self.stop_strings: dict[int, str | None] = {}
        self.last_usage: Any = None  # vLLM's continuous stats put one in every chunk
        self.choice_usage: dict[int, dict[str, Any]] = {}
        self.carries = [PieceCarry() for _ in range(n)] if want is not None else []
        self.told: set[int] = set()
        self.stop = False

    @property
    def complete(self) -> bool:
        return self.stop or len(self.reasons) == self.n

    def decode(self, events: Events) -> list[TextDelta]:
        texts: dict[int, list[str]] = {}
        pieces: dict[int, list[TokenPiece]] = {}
        for data in events:
            if data is None:
                self.stop = True
                break
            self._event(data, texts, pieces)
        out = []
        for index, parts in texts.items():
            delta = TextDelta("".join(parts), tokens=len(parts), index=index,
                              pieces=pieces.get(index, []) if self.want is not None else None)
            if index not in self.told and isinstance(self.last_usage, dict):
                prompt = self.last_usage.get("prompt_tokens")
                delta.prompt_tokens = prompt if isinstance(prompt, int) else None
                self.told.add(index)
            out.append(delta)
        return out

    def _event(self, data: dict[str, Any], texts: dict[int, list[str]], pieces: dict[int, list[TokenPiece]]) -> None:
        u = data.get("usage")
        if u:
            if not isinstance(u, dict):
                raise unexpected_shape('"usage" is not an object')
            self.last_usage = u
        choices = data.get("choices")
        if choices is None:
            return
        if not isinstance(choices, list):
            raise unexpected_shape('"choices" is not a list')
        for choice in choices:
            if not isinstance(choice, dict):
                raise unexpected_shape('an element of "choices" is not an object')
            index = _choice_index(choice, self.n)
            if self.n > 1 and u:
                self.choice_usage[index] = u
            text = choice.get("text")
            if text:
                if not isinstance(text, str):
                    raise unexpected_shape('"text" is not a string')
                texts.setdefault(index, []).append(text)
            if self.want is not None:
                piece = self.carries[index].piece(text or "", legacy_logprobs(choice.get("logprobs"), self.want))
                if piece is not None:
                    pieces.setdefault(index, []).extend(split_piece(piece))
            if choice.get("finish_reason"):
                self.reasons[index] = str(choice["finish_reason"])
                matched = choice.get("stop_reason")  # vLLM: the stop string that matched
                self.stop_strings[index] = matched if isinstance(matched, str) and matched else None

    def end(self) -> list[Finish]:
        """One ``Finish`` per choice; a stream that ended before every choice had a finish reason is a 502."""
        if len(self.reasons) < self.n:
            raise BackendError(502, "backend stream ended without a finish reason", kind="dropped")
        out = []
        for index in range(self.n):
            usage = _usage(self.choice_usage.get(index) if self.n > 1 else self.last_usage)
            reason = self.reasons[index]
            out.append(Finish("length" if reason == "length" else "stop", usage,
                              self.stop_strings[index] if reason == "stop" else None, index))
        return out


def _choice_index(choice: dict[str, Any], n: int) -> int:
    """Which of the ``n`` answers a streamed choice belongs to (a single answer ignores the field)."""
    if n == 1:
        return 0
    index = choice.get("index")
    if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < n:
        raise unexpected_shape(f'a choice "index" outside 0..{n - 1}')
    return index


def _usage(data: Any) -> Usage | None:
    if not isinstance(data, dict):
        return None
    details = data.get("prompt_tokens_details") or {}
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    return Usage(count(data.get("prompt_tokens")), count(data.get("completion_tokens")),
                 cached if isinstance(cached, int) and not isinstance(cached, bool) else None)


def legacy_logprobs(data: Any, top: int) -> list[TokenLogprob]:
    """The tokens of one streamed choice from OpenAI's legacy completions ``logprobs``
    (``tokens``, ``token_logprobs``, ``top_logprobs`` as ``{token: logprob}`` maps), with the ``top``
    most likely alternatives of each, best first. Nothing when the chunk has none."""
    if data is None:
        return []
    if not isinstance(data, dict):
        raise unexpected_shape('"logprobs" is not an object')
    tokens, values, alternatives = data.get("tokens"), data.get("token_logprobs"), data.get("top_logprobs")
    if not isinstance(tokens, list) or not isinstance(values, list) or len(values) != len(tokens):
        raise unexpected_shape('"logprobs" without matching "tokens" and "token_logprobs" lists')
    if not isinstance(alternatives, list):
        alternatives = []
    out = []
    for i, token in enumerate(tokens):
        if not isinstance(token, str):
            raise unexpected_shape('a "logprobs" token is not a string')
        best: list[TokenLogprob] = []
        options = alternatives[i] if i < len(alternatives) else None
        if top and isinstance(options, dict):
            ranked = sorted(((logprob_value(v), k) for k, v in options.items() if isinstance(k, str)),
                            key=lambda pair: -pair[0])
            best = [TokenLogprob(k, v, utf8(k)) for v, k in ranked[:top]]
        out.append(TokenLogprob(token, logprob_value(values[i]), utf8(token), best))
    return out


def split_piece(piece: TokenPiece) -> list[TokenPiece]:
    """One token per piece when the tokens spell the text exactly (else the piece stays whole: its
    tokens share its text)."""
    text, tokens = piece
    if len(tokens) > 1 and "".join(t.token for t in tokens) == text:
        return [(t.token, [t]) for t in tokens]
    return [piece]
