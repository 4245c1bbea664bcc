"""Client text is data, at the backend: a traced prompt sent so its client spans stay text
(``encode_prompt``) and counted exactly (``count_prompt``), in the control-text mode in force for
the backend (``app.control``, once at start-up).

What each mode sends, per backend:

* **llama.cpp** — ``tokens``: the prompt goes to ``/completion`` as llama-server's mixed prompt
  (strings, which it tokenizes with special tokens, and token ids): each *region* around client
  control text — from the end of the template's control token before it to the start of the one
  after, boundaries at which the tokenizer splits anyway — as the ids of its plain-text tokenization
  (``/tokenize`` with ``parse_special: false``), the rest as strings. The region is tokenized as a
  whole, so the client's text reads exactly as ordinary text would, neighbours merged as usual.
  (The regions are the control text's to find, ``ControlText.regions``; the mixed prompt the
  backend's to make, ``Backend.mixed_prompt``.)
* **vLLM with the model's ``tokenizer.json``** (``--chat-template DIR``) — ``tokens``: the whole
  prompt as token ids, tokenized in process (``app.vocab.TextTokenizer``), regions as plain text.
* **vLLM without it, any other OpenAI completions backend** — ``escape`` (the prompt stays text).

When no client text holds a control string — almost always — the prompt goes out as the same
string as ever. ``count_prompt`` is the prompt's exact length in tokens as the backend will read
it: the in-process tokenizer's count where there is one (no round trip), else the backend's
``/tokenize`` of the very prompt sent (llama-server takes the mixed form there too).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from app.control import TOKEN_PROMPTS

if TYPE_CHECKING:
    from app.pipeline.plan import Plan
    from app.served import ServedModel

log = logging.getLogger("toolwire")

# ------------------------------------------------------------------------------ the prompt sent


async def encode_prompt(planned: Plan, model: ServedModel) -> None:
    """Set ``planned.tokens`` to the prompt in the form that keeps its spans text (``None`` when it
    has none: the prompt goes as text)."""
    if not planned.spans or planned.tokens is not None:
        return
    text = planned.prompt + planned.prefill
    wide = model.control.regions(text, planned.spans)
    how = TOKEN_PROMPTS.get(model.backend.kind)
    if how == "ids" and model.tokenizer is not None:
        planned.tokens = await asyncio.to_thread(model.tokenizer.encode, text, wide)
    elif how == "mixed":
        planned.tokens = await model.backend.mixed_prompt(text, wide)
    else:  # spans are only traced where tokens can carry them (``app.control``)
        raise AssertionError(f"prompt spans for a backend that takes no token prompts ({model.backend.kind})")


async def count_prompt(planned: Plan, model: ServedModel) -> int:
    """The prompt's length in tokens, as the backend reads it (see the module docstring)."""
    await encode_prompt(planned, model)
    tokens = planned.tokens
    if tokens is not None and all(isinstance(t, int) for t in tokens):
        return len(tokens)
    if model.tokenizer is not None:
        return await asyncio.to_thread(model.tokenizer.count, planned.prompt + planned.prefill)
    return await model.backend.count_tokens(tokens if tokens is not None else planned.prompt + planned.prefill)


def counts_in_process(model: ServedModel) -> bool:
    """Whether ``count_prompt`` needs no backend (the model's tokenizer is in process)."""
    return model.tokenizer is not None


__all__ = ["count_prompt", "counts_in_process", "encode_prompt"]

