"""The vLLM dialect: OpenAI completions plus vLLM's extensions.

Images: vLLM's ``/v1/completions`` takes none (its ``prompt`` is text or token ids). A request with
images goes to its chat endpoint instead, ``POST /v1/chat/completions``, in a shape that keeps
toolwire's own work whole: one user message whose text part is the prompt toolwire rendered (the
chat template's image placeholders in it, as transformers renders them) and whose ``image_url``
parts are the images as data URLs, in prompt order; a request ``chat_template`` that writes the
text parts as they are and nothing else (``PASSTHROUGH_TEMPLATE``: vLLM detects it as taking
``openai`` content, so it adds no placeholders of its own); special tokens kept; no ``tools``, so
vLLM parses nothing — the answer's text streams back raw, to toolwire's parsers, as from
``/v1/completions``. vLLM's multimodal processor expands each placeholder for its image.

This needs vLLM 0.6.4 or later (``openai`` content-format detection) and, from 0.11 on, vLLM
started with ``--trust-request-chat-template``; without it vLLM answers 400, which toolwire
passes on saying so. vLLM must not split the answer itself (``--reasoning-parser``,
``--enable-auto-tool-choice``): a stream that comes back parsed is a 502 that says why. Why not
vLLM's render / tokens-in-tokens-out endpoints (``/v1/chat/completions/render``,
``/inference/v1/generate``): the render step renders vLLM's chat template itself (its
``/v1/completions/render`` takes no images), the generation step streams token ids, not text, and
it is two round trips.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, ClassVar

from app.backends.dialect import (
    BackendFacts,
    DialectOptions,
    Events,
    MediaInput,
    Tokenizer,
    drop_none,
    unexpected_shape,
)
from app.backends.generation import GenerationRequest, TextDelta
from app.backends.openai_completions import CompletionsDecoder, OpenAICompletions
from app.constraints.tools import Constraint, ConstraintRequest, vllm_constraint
from app.errors import BackendError
from app.media import IMAGE_TYPES

#: the request chat template of image requests: the one message's text parts, as they are (vLLM's
#: content-format detection sees the loop over ``message['content']`` and passes image parts as parts)
PASSTHROUGH_TEMPLATE = ("{%- for message in messages -%}{%- for part in message['content'] -%}"
                        "{%- if part['type'] == 'text' -%}{{- part['text'] -}}{%- endif -%}"
                        "{%- endfor -%}{%- endfor -%}")
CHAT_PATH = "/v1/chat/completions"


@dataclass(frozen=True)
class Vllm(OpenAICompletions):
    """vLLM: keep special tokens in the text (our parsers need the markers), let the chat template
    alone decide on BOS tokens, usage in every chunk (the prompt's token count arrives with the
    first token), ``n`` choices in one stream told apart by ``index``."""

    kind: ClassVar[str] = "vllm"
    native_n: ClassVar[bool] = True
    #: without added special tokens, as generation requests are sent; it tells the count itself
    tokenizer: ClassVar[Tokenizer | None] = Tokenizer("/tokenize", "prompt", counting={"add_special_tokens": False},
                                                      names_model=True, count_field="count")
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

    def media(self, facts: BackendFacts) -> MediaInput:
        """Images through the chat endpoint (see the module docstring); whether the served model takes
        them, vLLM says when asked."""
        return MediaInput(None, IMAGE_TYPES, None, "vLLM")

    def route(self, request: GenerationRequest) -> str:
        return CHAT_PATH if request.media else self.path

    def decoder(self, request: GenerationRequest) -> CompletionsDecoder:
        if request.media:
            return ChatDecoder(request.n, request.logprobs)
        return super().decoder(request)

    def body(self, request: GenerationRequest, model: str | None) -> dict[str, Any]:
        body = super().body(request, model)
        if request.media:
            body = chat_body(body, request)
        s = request.sampling
        body.update(drop_none({
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


def chat_body(completion: dict[str, Any], request: GenerationRequest) -> dict[str, Any]:
    """A ``/v1/completions`` body as the chat endpoint's (see the module docstring): the prompt and the
    images as one user message, the pass-through template, logprobs in the chat spelling."""
    body = {k: v for k, v in completion.items() if k not in ("prompt", "logprobs")}
    content: list[dict[str, Any]] = [{"type": "text", "text": str(request.prompt)}]
    for item in request.media:
        url: dict[str, Any] = {"url": item.data_url()}
        if item.detail is not None:
            url["detail"] = item.detail
        content.append({"type": "image_url", "image_url": url})
    body["messages"] = [{"role": "user", "content": content}]
    body["chat_template"] = PASSTHROUGH_TEMPLATE
    body["add_generation_prompt"] = False  # the prompt holds it already (the template reads neither)
    if request.logprobs is not None:
        body["logprobs"] = True
        body["top_logprobs"] = request.logprobs
    return body


class ChatDecoder(CompletionsDecoder):
    """The events of vLLM's chat stream for an image request, read as ``/v1/completions`` events:
    each choice's ``delta.content`` is its text, chat-shaped logprobs are its tokens' logprobs. A
    delta vLLM parsed itself (``reasoning``, ``tool_calls``) is a 502: toolwire's parsers need the
    raw text."""

    __slots__ = ()

    def decode(self, events: Events) -> list[TextDelta]:
        return super().decode([_as_completion(event) if event is not None else None for event in events])


def _as_completion(event: dict[str, Any]) -> dict[str, Any]:
    choices = event.get("choices")
    if not isinstance(choices, list):
        return event
    converted = []
    for choice in choices:
        if not isinstance(choice, dict):
            raise unexpected_shape('an element of "choices" is not an object')
        delta = choice.get("delta") or {}
        if not isinstance(delta, dict):
            raise unexpected_shape('"delta" is not an object')
        if delta.get("reasoning") or delta.get("reasoning_content") or delta.get("tool_calls"):
            raise BackendError(502, "vLLM parsed the answer itself (reasoning or tool calls came apart from the "
                               "text); behind toolwire start vLLM without --reasoning-parser and "
                               "--enable-auto-tool-choice", kind="bad_shape")
        converted.append({"index": choice.get("index", 0), "text": delta.get("content"),
                          "logprobs": _legacy_logprobs(choice.get("logprobs")),
                          "finish_reason": choice.get("finish_reason"), "stop_reason": choice.get("stop_reason")})
    return {**event, "choices": converted}


def _legacy_logprobs(data: Any) -> dict[str, Any] | None:
    """Chat logprobs (``content``: ``{token, logprob, top_logprobs: [{token, logprob}]}`` per token) in
    the legacy completions shape the decoder reads."""
    if not isinstance(data, dict) or not isinstance(data.get("content"), list):
        return None
    entries = [e for e in data["content"] if isinstance(e, dict)]
    return {"tokens": [e.get("token") for e in entries], "token_logprobs": [e.get("logprob") for e in entries],
            "top_logprobs": [{str(t.get("token")): t.get("logprob") for t in e.get("top_logprobs") or ()
                              if isinstance(t, dict)} for e in entries]}
