"""llama.cpp's ``llama-server``: ``POST /completion`` (its native streaming API)."""

from __future__ import annotations

from typing import Any

import httpx

from app.backends.base import (
    Backend,
    Finish,
    Generation,
    GenerationRequest,
    TextDelta,
    Usage,
    _drop_none,
    count,
    probe_timeout,
    unexpected_shape,
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
            **reasoning_budget_fields(request),
            **request.constraint,
        })

    async def generate(self, request: GenerationRequest) -> Generation:
        response = await self.open_stream("/completion", self.body(request))
        finish: Finish | None = None
        prompt_tokens: Any = None  # llama-server tells it with every token; handed on with the first delta
        told = False
        try:
            async for batch in self.sse_batches(response):
                texts: list[str] = []
                for data in batch:
                    if data is None:
                        break
                    text = data.get("content")
                    if text:
                        if not isinstance(text, str):
                            raise unexpected_shape('"content" is not a string')
                        texts.append(text)
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
                    delta = TextDelta("".join(texts), tokens=len(texts))
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
