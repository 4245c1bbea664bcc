"""The vLLM dialect: OpenAI completions plus vLLM's extensions."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from app.backends.base import _drop_none
from app.backends.dialect import DialectOptions, Probe
from app.backends.generation import GenerationRequest
from app.backends.openai_completions import OpenAICompletions
from app.constraints.tools import Constraint, ConstraintRequest, vllm_constraint
from app.errors import BackendError


@dataclass(frozen=True)
class Vllm(OpenAICompletions):
    """vLLM: keep special tokens in the text (our parsers need the markers), let the chat template
    alone decide on BOS tokens, usage in every chunk (the prompt's token count arrives with the
    first token), ``n`` choices in one stream told apart by ``index``."""

    kind: ClassVar[str] = "vllm"
    native_n: ClassVar[bool] = True
    tokenizes: ClassVar[bool] = True
    sniff: ClassVar[str | None] = "/v1/models"
    #: constrain with the pre-0.12 ``guided_*`` fields (``--vllm-legacy-guided``)
    legacy_guided: bool = False

    @classmethod
    def configured(cls, settings: DialectOptions) -> Vllm:
        return cls(legacy_guided=settings.vllm_legacy_guided)

    @staticmethod
    def recognises(answer: Any) -> bool:
        """vLLM's ``/v1/models`` says ``owned_by: vllm``."""
        data = answer.get("data") if isinstance(answer, dict) else None
        return isinstance(data, list) and any(isinstance(m, dict) and m.get("owned_by") == "vllm" for m in data)

    def constrain(self, request: ConstraintRequest) -> Constraint:
        if request.legacy_vllm != self.legacy_guided:
            request = replace(request, legacy_vllm=self.legacy_guided)
        return vllm_constraint(request)

    def body(self, request: GenerationRequest, model: str | None) -> dict[str, Any]:
        body = super().body(request, model)
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

    def tokenize(self, prompt: str | Sequence[str | int], model: str | None) -> Probe:
        """vLLM's ``POST /tokenize``, without added special tokens (as generation requests are sent)."""
        return Probe("tokenize", "/tokenize", _drop_none({"model": model, "prompt": prompt, "add_special_tokens": False}))

    def token_count(self, answer: Any) -> int:
        count = answer.get("count") if isinstance(answer, dict) else None
        if not isinstance(count, int):
            tokens = answer.get("tokens") if isinstance(answer, dict) else None
            if not isinstance(tokens, list):
                raise BackendError(502, "backend /tokenize answered without a count", kind="bad_json")
            count = len(tokens)
        return count
