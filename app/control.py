"""The control-text mode a model is served with (``control_for``, once at start-up): what
``--control-text`` asks, and for ``auto`` (the default) what the backend can take — a prompt in
tokens, so client text that holds a control string is sent as the plain text it is
(``app.pipeline.literal``), or else the prompt as text with such strings escaped — and the control
strings it protects, from every source at hand (``app.vocab``).

* **llama.cpp** — ``tokens``: llama-server takes prompts mixing text and token ids.
* **vLLM with the model's ``tokenizer.json``** (``--chat-template DIR``) — ``tokens``: the model's
  tokenizer in process, the prompt as token ids.
* **vLLM without it, any other OpenAI completions backend** — ``escape``.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from app.templates.literal import ControlText, Mode, inspected_strings
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


__all__ = ["TOKEN_PROMPTS", "control_for"]
