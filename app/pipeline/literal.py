"""Client text is data, at the backend: which control-text mode is in force for a backend
(``control_for``, once at start-up), and a traced prompt sent so its client spans stay text
(``encode_prompt``) and counted exactly (``count_prompt``).

What ``auto`` (the default ``--control-text``) puts in force, per backend:

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
from pathlib import Path
from typing import TYPE_CHECKING

from app.templates.literal import ControlText, Mode, Span, inspected_strings
from app.vocab import (
    TextTokenizer,
    Vocabulary,
    from_gguf,
    from_llamacpp,
    from_model_directory,
    model_directory,
    strong,
    template_markup,
)

if TYPE_CHECKING:
    from app.backends.base import Backend
    from app.pipeline.plan import Plan
    from app.served import ServedModel
    from app.settings import Settings
    from app.templates.chat_template import ChatTemplate

log = logging.getLogger("toolwire")

#: backends that take a prompt in tokens, and how: a mix of strings and ids, or ids only
TOKEN_PROMPTS = {"llamacpp": "mixed", "vllm": "ids"}


async def control_for(settings: Settings, backend: Backend, template: ChatTemplate | None,
                      ) -> tuple[ControlText, TextTokenizer | None]:
    """The control-text mode in force for ``backend`` and the strings it protects (see the module
    docstring), and the model's tokenizer in process where there is one; says so in the log."""
    wanted = settings.control_text
    if wanted == "allow":
        log.warning("control text: allow (--control-text allow): client text may hold control tokens the "
                    "model reads as the template's own (a user or a tool result can write a system turn)")
        return ControlText(mode="allow", why="--control-text allow"), None
    kind = backend.kind
    markup = template_markup(template) if template is not None else set()
    vocab, tokenizer = await _vocabulary(settings, backend, markup)
    mode: Mode
    if wanted != "auto":
        mode, why = wanted, f"--control-text {wanted}"
    elif kind == "llamacpp":
        mode, why = "tokens", "llama-server takes prompts mixing text and token ids"
    elif kind == "vllm" and tokenizer is not None:
        mode, why = "tokens", "vLLM takes token-id prompts and the model's tokenizer.json is at hand"
    else:
        mode = "escape"
        why = (f"backend {kind} takes no token prompts" if kind not in TOKEN_PROMPTS else
               "no tokenizer.json to tokenize with (pass --chat-template with the model's directory)")
    inspected = (inspected_strings(template.source, vocab.control, template._template.environment)
                 if template is not None else frozenset())
    control = ControlText(tuple(vocab.control), mode, vocab.unsplittable, inspected, f"{why}; {vocab.source}")
    if control.active:
        control.occurrences("")  # its matching tables built now, not on the first request
    line = (f"control text: {mode} ({why}); {len(control.strings)} control strings from {vocab.source or 'nowhere'}"
            + ("; unsplittable, escaped: " + ", ".join(sorted(vocab.unsplittable)) if vocab.unsplittable else ""))
    (log.info if mode == "tokens" else log.warning)(line)
    return control, tokenizer if kind == "vllm" else None  # it counts prompts in process in every mode


async def _vocabulary(settings: Settings, backend: Backend, markup: set[str]) -> tuple[Vocabulary, TextTokenizer | None]:
    """Every source at hand for the strings (``app.vocab``), and the tokenizer from a model directory."""
    kind = backend.kind
    vocab = Vocabulary()
    tokenizer: TextTokenizer | None = None
    folder = model_directory(settings.chat_template)
    if folder is not None:
        found, config = from_model_directory(folder, markup, kind == "llamacpp")
        vocab |= found
        if config is not None and kind == "vllm":
            try:
                tokenizer = TextTokenizer(config, found.control)
            except Exception as exc:  # noqa: BLE001 - a tokenizer the library cannot load: escape instead
                log.warning("control text: %s/tokenizer.json does not load (%s)", folder, exc)
    if settings.local_model is not None and kind == "llamacpp":
        path = _local_gguf(settings.local_model)
        if path is not None:
            vocab |= from_gguf(path, markup)
    if kind == "llamacpp":
        vocab |= await from_llamacpp(backend, markup, backend.facts.media_marker)
    if not vocab.control:  # nothing read: the template's markup of the special-token shapes
        vocab = Vocabulary(frozenset(m for m in markup if strong(m)), frozenset(),
                           "the chat template's markup (unconfirmed)")
    return vocab, tokenizer


def _local_gguf(model: Path) -> Path | None:
    from app.local.llama_server import resolve_model

    try:
        return resolve_model(model)
    except (OSError, RuntimeError) as exc:
        log.warning("control text: cannot read %s (%s)", model, exc)
        return None


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
    else:  # spans are only traced where tokens can carry them (``control_for``)
        raise AssertionError(f"prompt spans for a backend that takes no token prompts ({model.backend.kind})")


async def _mixed(text: str, wide: Sequence[Span], backend: Backend) -> list[str | int]:
    """llama-server's mixed prompt: the template's stretches as strings, the regions as the ids of
    their plain-text tokenization. It starts with a string (llama-server adds its BOS token only then)."""
    ids = await asyncio.gather(*(backend.tokenize_plain(text[a:b]) for a, b in wide))
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


__all__ = ["TOKEN_PROMPTS", "control_for", "count_prompt", "counts_in_process", "encode_prompt", "regions"]

