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
from collections.abc import Sequence
from typing import TYPE_CHECKING

from app.control import TOKEN_PROMPTS
from app.templates.literal import ControlText, Span

if TYPE_CHECKING:
    from app.backends.base import Backend
    from app.pipeline.plan import Plan
    from app.served import ServedModel

log = logging.getLogger("toolwire")

# ------------------------------------------------------------------------------ the prompt sent


def regions(text: str, spans: Sequence[Span], control: ControlText) -> list[Span]:
    """The stretches of ``text`` to tokenize as plain text: each span widened to the control strings
    around it that are not in a span (the template's own: the tokenizer splits there anyway), or to
    the text's ends; overlapping ones merged."""
    ordered = sorted(spans)
    own = [o for o in control.occurrences(text) if not _overlaps(o, ordered)]
    out: list[Span] = []
    k = 0
    for a, b in ordered:
        while k < len(own) and own[k][1] <= a:
            k += 1
        start = own[k - 1][1] if k else 0
        j = k
        while j < len(own) and own[j][0] < b:
            j += 1
        end = own[j][0] if j < len(own) else len(text)
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(end, out[-1][1]))
        else:
            out.append((start, end))
    return out


def _overlaps(occurrence: Span, spans: Sequence[Span]) -> bool:
    s, e = occurrence
    return any(a < e and s < b for a, b in spans)  # spans are few: a request rarely has more than a handful


async def encode_prompt(planned: Plan, model: ServedModel) -> None:
    """Set ``planned.tokens`` to the prompt in the form that keeps its spans text (``None`` when it
    has none: the prompt goes as text)."""
    if not planned.spans or planned.tokens is not None:
        return
    text = planned.prompt + planned.prefill
    wide = regions(text, planned.spans, model.control)
    how = TOKEN_PROMPTS.get(model.backend.kind)
    if how == "ids" and model.tokenizer is not None:
        planned.tokens = await asyncio.to_thread(model.tokenizer.encode, text, wide)
    elif how == "mixed":
        planned.tokens = await _mixed(text, wide, model.backend)
    else:  # spans are only traced where tokens can carry them (``app.control``)
        raise AssertionError(f"prompt spans for a backend that takes no token prompts ({model.backend.kind})")


async def _mixed(text: str, wide: Sequence[Span], backend: Backend) -> list[str | int]:
    """llama-server's mixed prompt: the template's stretches as strings, the regions as the ids of
    their plain-text tokenization. It starts with a string (llama-server adds its BOS token only then)."""
    ids = await asyncio.gather(*(backend.tokenize(text[a:b]) for a, b in wide))
    out: list[str | int] = []
    at = 0
    for (a, b), tokens in zip(wide, ids, strict=True):
        if a > at or not out:
            out.append(text[at:a])
        out.extend(tokens)
        at = b
    if at < len(text):
        out.append(text[at:])
    return out


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


__all__ = ["count_prompt", "counts_in_process", "encode_prompt", "regions"]

