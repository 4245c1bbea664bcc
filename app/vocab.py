"""Where a model's control-token strings come from, and its tokenizer in process.

Sources, and what each covers:

* **A model directory** (``--chat-template DIR``, or a file inside one): ``tokenizer.json``'s
  ``added_tokens`` — every token with ``special: true``, and those with ``special: false`` that are
  markup (``MARKUP``: Qwen's ``<tool_call>``, ``<think>``). Complete for the model; it also gives the
  tokenizer itself (``TextTokenizer``, via the ``tokenizers`` library). Without ``tokenizer.json``,
  ``tokenizer_config.json``'s ``added_tokens_decoder`` gives the same strings, but no tokenizer.
* **A GGUF file** (``--local-model``; ``app.gguf``): tokens of type *control*, and *user-defined*
  tokens that are markup. Complete for the model. llama.cpp matches user-defined tokens even when told
  not to parse special tokens, so those cannot be sent as plain text (``unsplittable``).
* **A running llama-server** (``/tokenize``): only what it can confirm — the chat template's own
  markup (in its source and in a small render) and its BOS / EOS text, each asked with and without
  special-token parsing. Control tokens the template never writes (another model's ``<|fim_…|>``)
  are not found this way. Its media marker (``/props`` ``media_marker``, else ``<__media__>``) is
  control text too: it places an image.
* **Nothing else** (a generic OpenAI completions backend, a vLLM without the model directory): the
  template's markup of the shapes special tokens have (``strong``), and its BOS / EOS text —
  unconfirmed, and nothing beyond it.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import logging
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.gguf import read_vocab

if TYPE_CHECKING:
    from app.backends.base import Backend
    from app.templates.chat_template import ChatTemplate

log = logging.getLogger("toolwire")

#: the shapes of chat-template markup that may be tokens of their own: ``<|im_start|>``,
#: ``<｜User｜>``, ``<start_of_turn>``, ``<tool_call>``, ``<turn|>``, ``[INST]``, MiniMax's ``]~!b[``
MARKUP = re.compile(r"<[|｜][^<>\s]{1,60}?[|｜]>|<\|?/?[A-Za-z_][\w:.\-▁]{0,40}\|?>|\[/?[A-Za-z][A-Za-z_]{1,30}\]"
                    r"|\]~!?b[\[\]]")
_STRONG = re.compile(r"<[|｜].*[|｜]>|<\|.*>|<.*\|>|\[/?[A-Z][A-Z_]*\]|\]~!?b[\[\]]|<[^<>]*[_:▁][^<>]*>"
                     r"|</?think>")
#: llama-server's media marker before it was made random per process (and when pinned by env)
MEDIA_MARKER = "<__media__>"


def strong(markup: str) -> bool:
    """Whether a piece of template markup has a special token's shape (``<|…|>``, ``<｜…｜>``,
    ``[INST]``, ``<start_of_turn>``, ``<think>``) rather than an XML-ish word (``<tools>``)."""
    return _STRONG.fullmatch(markup) is not None


def template_markup(template: ChatTemplate) -> set[str]:
    """``MARKUP`` found in the template's source and in one small render of it (markup built from
    parts, ``'<|' + role + '|>'``, shows only there), and its BOS / EOS text."""
    texts = [template.source, _sample_render(template)]
    found = {m.group() for text in texts for m in MARKUP.finditer(text)}
    found.update(t for t in (template.bos_token, template.eos_token) if t)
    return found


def _sample_render(template: ChatTemplate) -> str:
    from app.templates.chat_template import TemplateError

    tool = {"type": "function", "function": {"name": "f", "description": "d", "parameters": {
        "type": "object", "properties": {"q": {"type": "string", "description": "q"}}, "required": ["q"]}}}
    call = {"id": "a1B2c3D4e", "type": "function", "function": {"name": "f", "arguments": '{"q": "x"}'}}
    conversations: list[list[dict[str, Any]]] = [
        [{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
         {"role": "assistant", "content": "", "tool_calls": [call]},
         {"role": "tool", "tool_call_id": "a1B2c3D4e", "name": "f", "content": "r"},
         {"role": "assistant", "content": "a", "reasoning_content": "t"}, {"role": "user", "content": "u"}],
        [{"role": "user", "content": "u"}, {"role": "assistant", "content": "a"}, {"role": "user", "content": "u"}],
    ]
    out = []
    for messages in conversations:
        with contextlib.suppress(TemplateError):  # a sample the template refuses shows nothing
            out.append(template.render(messages, [tool], add_generation_prompt=True))
    return "\n".join(out)


@dataclass(frozen=True)
class Vocabulary:
    """Control strings as far as a source tells them (see the module docstring)."""

    control: frozenset[str] = frozenset()
    #: of those, strings the backend tokenizes as a token even in plain-text tokenization
    unsplittable: frozenset[str] = frozenset()
    source: str = ""

    def __or__(self, other: Vocabulary) -> Vocabulary:
        source = "; ".join(s for s in (self.source, other.source) if s)
        return Vocabulary(self.control | other.control, self.unsplittable | other.unsplittable, source)


# ------------------------------------------------------------------------------ model directory


def model_directory(path: Path | None) -> Path | None:
    """The directory ``--chat-template`` points into (itself, or the folder of the file)."""
    if path is None:
        return None
    return path if path.is_dir() else path.parent


def from_model_directory(folder: Path, markup: set[str], llamacpp: bool) -> tuple[Vocabulary, dict[str, Any] | None]:
    """Control strings from ``tokenizer.json`` (and its parsed content, for ``TextTokenizer``), else
    from ``tokenizer_config.json``; an empty ``Vocabulary`` when neither is there. ``llamacpp``: the
    backend is llama.cpp, which cannot tokenize non-special added tokens as text."""
    config: dict[str, Any] | None = None
    added: list[tuple[str, bool]] = []
    source = ""
    tokenizer_file = folder / "tokenizer.json"
    config_file = folder / "tokenizer_config.json"
    try:
        if tokenizer_file.is_file():
            config = json.loads(tokenizer_file.read_text(encoding="utf-8"))
            added = [(str(t.get("content", "")), bool(t.get("special"))) for t in config.get("added_tokens") or ()
                     if isinstance(t, dict)]
            source = f"{tokenizer_file}"
        elif config_file.is_file():
            decoder = json.loads(config_file.read_text(encoding="utf-8")).get("added_tokens_decoder") or {}
            added = [(str(t.get("content", "")), bool(t.get("special"))) for t in decoder.values() if isinstance(t, dict)]
            source = f"{config_file} (no tokenizer.json)"
    except (OSError, ValueError) as exc:
        log.warning("control tokens: could not read the tokenizer in %s (%s)", folder, exc)
        return Vocabulary(), None
    control = {text for text, special in added if special or text in markup or MARKUP.fullmatch(text)}
    unsplittable = {text for text, special in added if not special and text in control} if llamacpp else set()
    if not source:
        return Vocabulary(), None
    return Vocabulary(frozenset(control), frozenset(unsplittable), source), config


# ------------------------------------------------------------------------------ GGUF


def from_gguf(path: Path, markup: set[str]) -> Vocabulary:
    """Control strings from a GGUF file's vocabulary (see the module docstring)."""
    vocab = read_vocab(path)
    user = {t for t in vocab.user_defined.values() if t in markup or MARKUP.fullmatch(t)}
    return Vocabulary(frozenset(vocab.control.values()) | frozenset(user), frozenset(user),
                      f"{path.name}: {len(vocab.control)} control tokens, {len(user)} user-defined markup tokens")


# ------------------------------------------------------------------------------ llama-server


async def from_llamacpp(backend: Backend, candidates: Iterable[str], media_marker: str | None) -> Vocabulary:
    """The candidates a running llama-server confirms as tokens of their own: one token with
    special-token parsing, something else without (a control token); one token both ways when
    markup (a user-defined token, ``unsplittable``). Its media marker is control text whatever it is."""
    wanted = sorted(set(candidates))

    async def ask(text: str, special: bool) -> list[int] | None:
        try:
            return await backend.tokenize(text, special)
        except Exception:  # noqa: BLE001 - a candidate the server does not confirm is not one
            return None

    parsed = await asyncio.gather(*(ask(text, True) for text in wanted))
    singles = [text for text, tokens in zip(wanted, parsed, strict=True) if tokens is not None and len(tokens) == 1]
    plain = await asyncio.gather(*(ask(text, False) for text in singles))
    control: set[str] = set()
    unsplittable: set[str] = set()
    for text, tokens in zip(singles, plain, strict=True):
        if tokens is None:
            continue
        if len(tokens) != 1:
            control.add(text)
        elif MARKUP.fullmatch(text):
            control.add(text)
            unsplittable.add(text)
    markers = {m for m in (media_marker, MEDIA_MARKER) if m}
    return Vocabulary(frozenset(control | markers), frozenset(unsplittable),
                      f"llama-server /tokenize: {len(control)} of the template's {len(wanted)} markup strings are "
                      f"tokens; media marker")


# ------------------------------------------------------------------------------ in process


class TextTokenizer:
    """A model's tokenizer in process (``tokenizers``, from ``tokenizer.json``), twice: as the model
    reads a prompt (control strings become their tokens) and as plain text (they do not: the control
    tokens removed from its added tokens). ``encode`` tokenizes a prompt whose ``regions`` are read
    as plain text. Each piece after the first is tokenized behind a sentinel token and the sentinel
    dropped, so it is tokenized as the part of a longer text it is (a SentencePiece-style tokenizer
    prefixes only a text's first piece with its space marker)."""

    SENTINEL = "\U000f0002toolwire-sentinel\U000f0003"

    def __init__(self, config: dict[str, Any], control: Iterable[str]) -> None:
        from tokenizers import Tokenizer

        control = set(control)
        ids = [t["id"] for t in config.get("added_tokens") or () if isinstance(t, dict) and isinstance(t.get("id"), int)]
        vocab = (config.get("model") or {}).get("vocab")
        size = len(vocab) if isinstance(vocab, (dict, list)) else 0
        sentinel = {"id": max([size, *ids]) + 1, "content": self.SENTINEL, "single_word": False, "lstrip": False,
                    "rstrip": False, "normalized": False, "special": True}
        full = copy.copy(config)
        full["added_tokens"] = [*(config.get("added_tokens") or ()), sentinel]
        plain = copy.copy(config)
        plain["added_tokens"] = [*(t for t in config.get("added_tokens") or ()
                                   if not (isinstance(t, dict) and t.get("content") in control)), sentinel]
        self.full = Tokenizer.from_str(json.dumps(full))
        self.plain = Tokenizer.from_str(json.dumps(plain))
        #: the sentinel's id in each (the library may number an added token its own way)
        self.sentinel_ids = {False: self.full.token_to_id(self.SENTINEL), True: self.plain.token_to_id(self.SENTINEL)}

    @classmethod
    def load(cls, path: Path, control: Iterable[str]) -> TextTokenizer:
        return cls(json.loads(path.read_text(encoding="utf-8")), control)

    def count(self, text: str) -> int:
        """The prompt's tokens, read as the model reads it."""
        return len(self.full.encode_batch([text], add_special_tokens=False)[0].ids)

    def encode(self, text: str, regions: Sequence[tuple[int, int]] = ()) -> list[int]:
        """``text`` as token ids, ``regions`` (sorted, not overlapping) read as plain text."""
        pieces: list[tuple[int, int, bool]] = []
        at = 0
        for a, b in regions:
            if a > at:
                pieces.append((at, a, False))
            pieces.append((a, b, True))
            at = b
        if at < len(text) or not pieces:
            pieces.append((at, len(text), False))
        behind = self.SENTINEL not in text
        inputs = {False: [], True: []}  # type: dict[bool, list[str]]
        for a, b, plain in pieces:
            inputs[plain].append(self.SENTINEL + text[a:b] if a and behind else text[a:b])
        encoded = {plain: iter(tokenizer.encode_batch(inputs[plain], add_special_tokens=False) if inputs[plain] else [])
                   for plain, tokenizer in ((False, self.full), (True, self.plain))}
        out: list[int] = []
        for a, _b, plain in pieces:
            ids = next(encoded[plain]).ids
            out.extend(ids[1:] if a and behind and ids[:1] == [self.sentinel_ids[plain]] else ids)
        return out
