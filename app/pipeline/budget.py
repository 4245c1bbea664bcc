"""How many tokens a request may ask for: ``--max-tokens-cap``, then the backend's context.

Agents ask for more output than a local model has room for (opencode and Claude Code send
``max_tokens`` 32000, pydantic-ai's Anthropic model 64000); a backend with an 8k context rejects
that (vLLM) or runs out of room. With ``--max-tokens-policy clamp`` (the default) an oversized
``max_tokens`` is lowered — to the cap, and to what fits in the context after the prompt — and the
response says so in the ``X-Toolwire-Max-Tokens`` header (and one log line). ``reject`` keeps the
cap's 400 and leaves the context to the backend.

A request never costs a round trip when it obviously fits: a prompt of B UTF-8 bytes is at most B
tokens (every token covers at least one byte; ``MARGIN`` covers the BOS and other tokens a
tokenizer adds), so ``B + MARGIN + max_tokens <= context`` needs nothing. Otherwise the prompt is
counted exactly as the backend will read it (``app.pipeline.literal.count_prompt``: by the model's
tokenizer in process where there is one — no round trip — else by the backend's); a prompt that
leaves no room for any output is a 400 naming the context length.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from app.backends.generation import Sampling
from app.errors import APIError, BackendError, bad_request
from app.pipeline.literal import count_prompt, counts_in_process
from app.settings import Settings

if TYPE_CHECKING:
    from app.pipeline.plan import Plan
    from app.served import ServedModel

log = logging.getLogger("toolwire")

HEADER = "X-Toolwire-Max-Tokens"
#: tokens a tokenizer may add beyond one per prompt byte (BOS, EOS, a leading space) — with room to spare
MARGIN = 16


@dataclass(frozen=True)
class Clamp:
    """``max_tokens`` lowered from ``requested`` to ``granted``, and why."""

    requested: int
    granted: int
    why: str

    def describe(self) -> str:
        return f"clamped from {self.requested} to {self.granted} ({self.why})"


def cap_max_tokens(requested: int | None, settings: Settings) -> tuple[int | None, Clamp | None]:
    """``requested`` under ``--max-tokens-cap``: an unbounded request gets the cap (the backend's own
    default may be unbounded); a larger one is a 400 (policy ``reject``) or the cap (``clamp``)."""
    cap = settings.max_tokens_cap
    if not cap:
        return requested, None
    if not requested:
        return cap, None
    if requested <= cap:
        return requested, None
    if settings.max_tokens_policy == "reject":
        raise bad_request(f"max_tokens exceeds this server's cap of {cap}", "max_tokens")
    return cap, Clamp(requested, cap, f"--max-tokens-cap {cap}")


def obviously_fits(prompt: str, max_tokens: int, context: int) -> bool:
    """Whether ``prompt`` and ``max_tokens`` fit in ``context`` whatever the tokenizer (see the module
    docstring); cheap: the prompt is encoded only when 4 bytes a character might not fit."""
    room = context - MARGIN - max_tokens
    return 4 * len(prompt) <= room or len(prompt.encode("utf-8", "surrogatepass")) <= room


async def fit_to_context(requested: int, planned: Plan, model: ServedModel) -> Clamp | None:
    """``requested`` lowered to what the backend's context holds after the planned prompt (``None``:
    it fits, or the backend's context or tokenizer is unknown — the backend then decides as it would
    have). A backend whose tokenizer endpoint answered "not found" is not asked again for a while
    (``Backend.counts_tokens``): that request and the next ones go on as asked, logged once."""
    backend = model.backend
    context = backend.facts.context_length
    prompt = planned.prompt + planned.prefill
    if context is None or obviously_fits(prompt, requested, context):
        return None
    if not counts_in_process(model) and not backend.counts_tokens:
        return None
    try:
        prompt_tokens = await count_prompt(planned, model)
    except BackendError as exc:
        log.warning("max_tokens not fitted to the context: counting the prompt failed (%s)", exc.message)
        return None
    room = context - prompt_tokens
    if room < 1:
        raise APIError(400, f"the prompt is {prompt_tokens} tokens, which leaves no room for output in the "
                       f"model's context of {context} tokens", code="context_length_exceeded")
    if requested <= room:
        return None
    return Clamp(requested, room, f"context {context}, prompt {prompt_tokens} tokens")


async def fit_max_tokens(sampling: Sampling, planned: Plan, model: ServedModel, settings: Settings) -> dict[str, str]:
    """Apply the cap, then (policy ``clamp``) the context, to ``sampling.max_tokens`` in place; the
    response headers that say what was lowered (empty when nothing was)."""
    requested = sampling.max_tokens
    granted, clamp = cap_max_tokens(requested, settings)
    if settings.max_tokens_policy == "clamp" and granted:
        fitted = await fit_to_context(granted, planned, model)
        if fitted is not None:
            clamp = Clamp(requested or granted, fitted.granted, fitted.why)
            granted = fitted.granted
    sampling.max_tokens = granted
    return announce(clamp)


def announce(clamp: Clamp | None) -> dict[str, str]:
    """The response headers (and the log line) that say ``max_tokens`` was lowered."""
    if clamp is None:
        return {}
    log.info("max_tokens %s", clamp.describe())
    return {HEADER: clamp.describe()}
