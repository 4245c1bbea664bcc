"""llama.cpp's ``llama-server``: ``POST /completion`` (its native streaming API)."""

from __future__ import annotations

import math
from typing import Any

import httpx

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
    probe_timeout,
    unexpected_shape,
    utf8,
)
from app.constraints.tools import Constraint, ConstraintRequest, llamacpp_constraint
from app.errors import BackendError


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


class LlamaCppBackend(Backend):
    kind = "llamacpp"

    #: set at start-up: does llama-server add a BOS token to a prompt itself?
    adds_bos: bool = False

    def constrain(self, request: ConstraintRequest) -> Constraint:
        return llamacpp_constraint(request)

    def body(self, request: GenerationRequest) -> dict[str, Any]:
        s = request.sampling
        return _drop_none({
            "prompt": request.prompt,
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

    async def generate(self, request: GenerationRequest) -> Generation:
        response = await self.open_stream("/completion", self.body(request))
        finish: Finish | None = None
        prompt_tokens: Any = None  # llama-server tells it with every token; handed on with the first delta
        told = False
        want = request.logprobs
        carry = PieceCarry()
        try:
            async for batch in self.sse_batches(response):
                texts: list[str] = []
                pieces: list[TokenPiece] = []
                for data in batch:
                    if data is None:
                        break
                    text = data.get("content")
                    if text:
                        if not isinstance(text, str):
                            raise unexpected_shape('"content" is not a string')
                        texts.append(text)
                    if want is not None:
                        piece = carry.piece(text or "", token_probabilities(data.get("completion_probabilities"), want))
                        if piece is not None:
                            pieces.append(piece)
                    if prompt_tokens is None:
                        prompt_tokens = data.get("tokens_evaluated")
                    if data.get("stop"):
                        timings = data.get("timings")
                        cached = timings.get("cache_n") if isinstance(timings, dict) else None
                        usage = Usage(count(data.get("tokens_evaluated")), count(data.get("tokens_predicted")),
                                      cached if isinstance(cached, int) and not isinstance(cached, bool) else None)
                        stop_type = data.get("stop_type")
                        word = data.get("stopping_word") if stop_type == "word" else None
                        finish = Finish("length" if stop_type == "limit" else "stop", usage,
                                        word if isinstance(word, str) and word else None)
                        break
                if texts:
                    delta = TextDelta("".join(texts), tokens=len(texts), pieces=pieces if want is not None else None)
                    if not told and isinstance(prompt_tokens, int) and not isinstance(prompt_tokens, bool):
                        delta.prompt_tokens = prompt_tokens
                        told = True
                    yield delta
                if finish is not None or (batch and batch[-1] is None):
                    break
        finally:
            await response.aclose(finished=finish is not None)
        if finish is None:
            raise BackendError(502, "backend stream ended before the final event", kind="dropped")
        yield finish

    async def count_tokens(self, prompt: str) -> int:
        """``POST /tokenize`` with the special-token handling ``/completion`` applies to a prompt (BOS
        added where the model adds one, special tokens parsed)."""
        data = await self._post_json("/tokenize", {"content": prompt, "add_special": True, "parse_special": True})
        tokens = data.get("tokens") if isinstance(data, dict) else None
        if not isinstance(tokens, list):
            raise BackendError(502, "backend /tokenize answered without tokens", kind="bad_json")
        return len(tokens)

    async def chat_template(self) -> dict[str, str] | None:
        try:
            response = await self.client.get(self.url("/props"), headers=self.headers, timeout=probe_timeout(self.client))
            props = response.json()
        except (httpx.HTTPError, ValueError):
            return None
        if not isinstance(props, dict) or not props.get("chat_template"):
            return None
        return {k: str(props.get(k) or "") for k in ("chat_template", "bos_token", "eos_token")}

    async def detect_bos(self) -> None:
        """Ask the tokenizer whether an empty prompt gets a BOS token (then the template's own
        BOS text must not be sent as well)."""
        try:
            response = await self.client.post(self.url("/tokenize"), json={"content": "", "add_special": True},
                                              headers=self.headers, timeout=probe_timeout(self.client))
            self.adds_bos = bool(response.json().get("tokens"))
        except (httpx.HTTPError, ValueError, AttributeError):
            self.adds_bos = False
