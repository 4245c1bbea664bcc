"""OpenAI-style ``POST /v1/completions`` backends: vLLM (with its extensions) and generic ones."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from app.backends.base import (
    Backend,
    Finish,
    Generation,
    GenerationRequest,
    PieceCarry,
    TextDelta,
    TokenLogprob,
    TokenPiece,
    Usage,
    _drop_none,
    count,
    logprob_value,
    unexpected_shape,
    utf8,
)
from app.constraints.tools import Constraint, ConstraintRequest, vllm_constraint
from app.errors import BackendError


class OpenAICompletionsBackend(Backend):
    """Any OpenAI-compatible completions API. Special tokens and constraints are up to it."""

    kind = "openai"

    def body(self, request: GenerationRequest) -> dict[str, Any]:
        s = request.sampling
        return _drop_none({
            "model": self.model,
            "prompt": request.prompt,
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

    async def generate(self, request: GenerationRequest) -> Generation:
        """The completion's text (for ``n`` > 1, each choice's by its ``index``), then one ``Finish``
        per choice."""
        n = request.n if self.native_n else 1
        response = await self.open_stream("/v1/completions", self.body(request))
        want = request.logprobs
        reasons: dict[int, str] = {}
        stop_strings: dict[int, str | None] = {}
        last_usage: Any = None  # the latest usage object (vLLM's continuous stats put one in every chunk)
        choice_usage: dict[int, dict[str, Any]] = {}  # with n > 1: the latest usage seen beside each choice's text
        carries = [PieceCarry() for _ in range(n)] if want is not None else []
        told: set[int] = set()
        done = False
        try:
            async for batch in self.sse_batches(response):
                texts: dict[int, list[str]] = {}
                pieces: dict[int, list[TokenPiece]] = {}
                for data in batch:
                    if data is None:
                        done = True
                        break
                    u = data.get("usage")
                    if u:
                        if not isinstance(u, dict):
                            raise unexpected_shape('"usage" is not an object')
                        last_usage = u
                    choices = data.get("choices")
                    if choices is None:
                        choices = []
                    elif not isinstance(choices, list):
                        raise unexpected_shape('"choices" is not a list')
                    for choice in choices:
                        if not isinstance(choice, dict):
                            raise unexpected_shape('an element of "choices" is not an object')
                        index = _choice_index(choice, n)
                        if n > 1 and u:
                            choice_usage[index] = u
                        text = choice.get("text")
                        if text:
                            if not isinstance(text, str):
                                raise unexpected_shape('"text" is not a string')
                            texts.setdefault(index, []).append(text)
                        if want is not None:
                            piece = carries[index].piece(text or "", legacy_logprobs(choice.get("logprobs"), want))
                            if piece is not None:
                                pieces.setdefault(index, []).extend(split_piece(piece))
                        if choice.get("finish_reason"):
                            reasons[index] = str(choice["finish_reason"])
                            matched = choice.get("stop_reason")  # vLLM: the stop string that matched
                            stop_strings[index] = matched if isinstance(matched, str) and matched else None
                for index, parts in texts.items():
                    delta = TextDelta("".join(parts), tokens=len(parts), index=index,
                                      pieces=pieces.get(index, []) if want is not None else None)
                    if index not in told and isinstance(last_usage, dict):
                        prompt = last_usage.get("prompt_tokens")
                        delta.prompt_tokens = prompt if isinstance(prompt, int) else None
                        told.add(index)
                    yield delta
                if done:
                    break
        finally:
            await response.aclose(finished=done or len(reasons) == n)
        if len(reasons) < n:
            raise BackendError(502, "backend stream ended without a finish reason", kind="dropped")
        for index in range(n):
            usage = _usage(choice_usage.get(index) if n > 1 else last_usage)
            reason = reasons[index]
            yield Finish("length" if reason == "length" else "stop", usage,
                         stop_strings[index] if reason == "stop" else None, index)


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


class VllmBackend(OpenAICompletionsBackend):
    """vLLM: keep special tokens in the text (our parsers need the markers) and let the chat
    template alone decide on BOS tokens."""

    kind = "vllm"
    native_n = True  # ``n`` choices in one stream, told apart by ``index``
    #: constrain with the pre-0.12 ``guided_*`` fields (``--vllm-legacy-guided``)
    legacy_guided: bool = False

    def constrain(self, request: ConstraintRequest) -> Constraint:
        return vllm_constraint(replace(request, legacy_vllm=self.legacy_guided))

    def body(self, request: GenerationRequest) -> dict[str, Any]:
        body = super().body(request)
        s = request.sampling
        body.update(_drop_none({
            "skip_special_tokens": False,
            "spaces_between_special_tokens": False,
            "add_special_tokens": False,
            "top_k": s.top_k,
            "min_p": s.min_p,
            "repetition_penalty": s.repetition_penalty,
            # vLLM's reasoning budget (its own reasoning config decides the block's markers)
            "thinking_token_budget": request.reasoning_budget if request.reasoning is not None else None,
        }))
        # usage in every chunk: the prompt's token count is known with the first token
        body["stream_options"] = {"include_usage": True, "continuous_usage_stats": True}
        return body

    async def count_tokens(self, prompt: str) -> int:
        """vLLM's ``POST /tokenize``, without added special tokens (as generation requests are sent)."""
        data = await self._post_json("/tokenize", _drop_none({"model": self.model, "prompt": prompt,
                                                              "add_special_tokens": False}))
        count = data.get("count") if isinstance(data, dict) else None
        if not isinstance(count, int):
            tokens = data.get("tokens") if isinstance(data, dict) else None
            if not isinstance(tokens, list):
                raise BackendError(502, "backend /tokenize answered without a count", kind="bad_json")
            count = len(tokens)
        return count
