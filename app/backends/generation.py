"""What a generation is asked (``GenerationRequest``, its ``Sampling``) and what it yields
(``TextDelta``s, then one ``Finish`` per answer, with ``Usage``): plain data, shared by the backends,
their dialects and the pipeline."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import Any

from app.constraints.tools import ReasoningGate
from app.media import Media


@dataclass
class Sampling:
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    stop: list[str] = field(default_factory=list)
    seed: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repetition_penalty: float | None = None
    logit_bias: dict[int, float] | None = None  # by token id


@dataclass(slots=True)
class TokenLogprob:
    """One generated token as the backend reports it: its text, natural-log probability, UTF-8 bytes
    (``None`` when unknown) and the most likely alternatives (``top``: tokens with empty ``top``)."""

    token: str
    logprob: float
    bytes: list[int] | None = None
    top: list[TokenLogprob] = field(default_factory=list)


#: a piece of generated text and the tokens that produced it (tokens of a piece that has no text of
#: its own — half a character, a held stop-string prefix — are completed by the next piece's text)
TokenPiece = tuple[str, list[TokenLogprob]]


@dataclass
class GenerationRequest:
    prompt: str
    sampling: Sampling = field(default_factory=Sampling)
    #: marker strings that must reach the parsers as text (llama.cpp drops special tokens otherwise)
    preserved_tokens: tuple[str, ...] = ()
    #: backend-specific constraint fields merged into the upstream body (grammar, structured_outputs …)
    constraint: dict[str, Any] = field(default_factory=dict)
    #: most tokens to spend inside the reasoning block, for backends that can enforce it; ``reasoning``
    #: says which block (its markers, and whether the prompt already opened it)
    reasoning_budget: int | None = None
    reasoning: ReasoningGate | None = None
    #: ask for each token's logprob and this many alternatives (``None``: no logprobs)
    logprobs: int | None = None
    #: answers to generate from the one prompt (only backends with ``native_n`` are sent more than 1)
    n: int = 1
    #: the prompt in tokens, sent instead of ``prompt`` when set — llama-server's mix of strings and
    #: token ids, or token ids (vLLM) — so client text holding control strings stays text
    #: (``app.pipeline.literal``)
    tokens: list[str | int] | list[int] | None = None
    #: the prompt's images, in the order the prompt holds them (``app.media``)
    media: tuple[Media, ...] = ()

    @property
    def sent_prompt(self) -> str | list[str | int] | list[int]:
        """What goes upstream as the prompt: ``tokens`` where set, else ``prompt``."""
        return self.tokens if self.tokens is not None else self.prompt


@dataclass
class TextDelta:
    text: str
    #: the prompt's token count, when the backend tells it before the end (set on the first delta)
    prompt_tokens: int | None = None
    #: how many generated tokens the text holds (the backend's events joined into it)
    tokens: int = 1
    #: which answer the text belongs to (``n`` > 1)
    index: int = 0
    #: with logprobs asked: ``text`` split into pieces with the tokens that produced each
    pieces: list[TokenPiece] | None = None


@dataclass
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int | None = None

    def as_openai(self, reasoning_tokens: int = 0) -> dict[str, Any]:
        """Chat Completions' usage object (``reasoning_tokens``: of the completion's tokens, those
        whose text went into reasoning)."""
        usage: dict[str, Any] = {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
            "completion_tokens_details": {"reasoning_tokens": min(reasoning_tokens, self.completion_tokens)},
        }
        if self.cached_tokens is not None:
            usage["prompt_tokens_details"] = {"cached_tokens": self.cached_tokens}
        return usage


@dataclass
class Finish:
    reason: str  # "stop" | "length"
    usage: Usage | None = None
    #: the request's stop string that ended the output (``None``: end of sequence, length, or not reported)
    stop_sequence: str | None = None
    #: which answer ended (``n`` > 1)
    index: int = 0


Generation = AsyncGenerator[TextDelta | Finish, None]
