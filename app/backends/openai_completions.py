"""OpenAI-style ``POST /v1/completions`` backends: vLLM (with its extensions) and generic ones."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from app.backends.base import (
    Backend,
    Finish,
    Generation,
    GenerationRequest,
    TextDelta,
    Usage,
    _drop_none,
    count,
    unexpected_shape,
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
            **request.constraint,
        })

    async def generate(self, request: GenerationRequest) -> Generation:
        response = await self.open_stream("/v1/completions", self.body(request))
        reason: str | None = None
        stop_string: str | None = None
        last_usage: Any = None  # the latest usage object (vLLM's continuous stats put one in every chunk)
        told = False
        done = False
        try:
            async for batch in self.sse_batches(response):
                texts: list[str] = []
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
                        text = choice.get("text")
                        if text:
                            if not isinstance(text, str):
                                raise unexpected_shape('"text" is not a string')
                            texts.append(text)
                        if choice.get("finish_reason"):
                            reason = str(choice["finish_reason"])
                            matched = choice.get("stop_reason")  # vLLM: the stop string that matched
                            stop_string = matched if isinstance(matched, str) and matched else None
                if texts:
                    delta = TextDelta("".join(texts), tokens=len(texts))
                    if not told and isinstance(last_usage, dict):
                        prompt = last_usage.get("prompt_tokens")
                        delta.prompt_tokens = prompt if isinstance(prompt, int) else None
                        told = True
                    yield delta
                if done:
                    break
        finally:
            await response.aclose(finished=done or reason is not None)
        if reason is None:
            raise BackendError(502, "backend stream ended without a finish reason", kind="dropped")
        usage: Usage | None = None
        if isinstance(last_usage, dict):
            details = last_usage.get("prompt_tokens_details") or {}
            cached = details.get("cached_tokens") if isinstance(details, dict) else None
            usage = Usage(count(last_usage.get("prompt_tokens")), count(last_usage.get("completion_tokens")),
                          cached if isinstance(cached, int) and not isinstance(cached, bool) else None)
        yield Finish("length" if reason == "length" else "stop", usage,
                     stop_string if reason == "stop" else None)


class VllmBackend(OpenAICompletionsBackend):
    """vLLM: keep special tokens in the text (our parsers need the markers) and let the chat
    template alone decide on BOS tokens."""

    kind = "vllm"
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
