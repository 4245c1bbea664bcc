"""OpenAI-style ``POST /v1/completions`` backends: vLLM (with its extensions) and generic ones."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from app.backends.base import Backend, Finish, Generation, GenerationRequest, TextDelta, Usage, _drop_none
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
            **request.constraint,
        })

    async def generate(self, request: GenerationRequest) -> Generation:
        response = await self.open_stream("/v1/completions", self.body(request))
        reason: str | None = None
        usage: Usage | None = None
        done = False
        try:
            async for batch in self.sse_batches(response):
                texts: list[str] = []
                for data in batch:
                    if data is None:
                        done = True
                        break
                    if data.get("usage"):
                        u = data["usage"]
                        details = u.get("prompt_tokens_details") or {}
                        usage = Usage(int(u.get("prompt_tokens") or 0), int(u.get("completion_tokens") or 0),
                                      details.get("cached_tokens"))
                    for choice in data.get("choices") or ():
                        text = choice.get("text")
                        if text:
                            texts.append(text)
                        if choice.get("finish_reason"):
                            reason = choice["finish_reason"]
                if texts:
                    yield TextDelta("".join(texts))
                if done:
                    break
        finally:
            await response.aclose(finished=done or reason is not None)
        if reason is None:
            raise BackendError(502, "backend stream ended without a finish reason", kind="dropped")
        yield Finish("length" if reason == "length" else "stop", usage)


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
        }))
        return body
