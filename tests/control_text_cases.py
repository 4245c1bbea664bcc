"""What the control-text tests send: one request per face with a string in every kind of client field
(``requests``), the template markup a test treats as a model's control tokens (``markup_of``, our own
rule, independent of ``app.vocab``), and small tokenizer files (``byte_tokenizer``,
``gguf_tokenizer``) — nothing is downloaded."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from app.served import NO_CONTROL

#: the shapes of special tokens in the chat templates under ``/work/shared/templates``
SPECIAL_SHAPES = re.compile(r"<\|[^<>|\s]{1,40}\|>|<｜[^<>｜\s]{1,40}｜>|\[/?[A-Z][A-Z_]{1,20}\]|</?think>"
                            r"|<(?:start|end)_of_turn>|</?tool_call>")
SCHEMA = {"type": "object", "properties": {"q": {"type": "string", "description": "what to look up"}},
          "required": ["q"]}


@contextlib.contextmanager
def allowing(proxy: Any) -> Iterator[None]:
    """The proxy as it was before client control text was traced (``--control-text allow``): what
    the old code sent, for comparison."""
    runtime = proxy.runtime
    model = runtime.model
    runtime.model = dataclasses.replace(model, control=NO_CONTROL)
    try:
        yield
    finally:
        runtime.model = model


def markup_of(source: str) -> list[str]:
    """The special-token-shaped markup a template source writes (sorted)."""
    return sorted({m.group() for m in SPECIAL_SHAPES.finditer(source)})


def requests(mark: str) -> dict[str, tuple[str, dict[str, Any]]]:
    """Per face, its path and a request holding ``mark`` in every client field it has: system text /
    instructions, user text, a user's name, assistant text and reasoning handed back, tool-call ids,
    names and arguments handed back, tool results, tool definitions (description, schema keys and
    descriptions), ``chat_template_kwargs``, and (Messages) the text an answer continues."""
    schema = {"type": "object", "properties": {f"q{mark}": {"type": "string", "description": f"d{mark}"}}}
    arguments = json.dumps({f"q{mark}": f"v{mark}"})
    chat = {"model": "m", "max_tokens": 8, "messages": [
        {"role": "system", "content": f"S{mark}"},
        {"role": "user", "content": f"U{mark}", "name": f"n{mark}"},
        {"role": "assistant", "content": f"A{mark}", "reasoning_content": f"R{mark}",
         "tool_calls": [{"id": f"c{mark}", "type": "function", "function": {"name": f"f{mark}", "arguments": arguments}}]},
        {"role": "tool", "tool_call_id": f"c{mark}", "content": f"T{mark}"},
        {"role": "user", "content": [{"type": "text", "text": f"P{mark}"}]}],
        "tools": [{"type": "function", "function": {"name": "lookup", "description": f"D{mark}", "parameters": schema}}],
        "chat_template_kwargs": {"custom": f"K{mark}"}}
    responses = {"model": "m", "max_output_tokens": 8, "store": False, "instructions": f"I{mark}", "input": [
        {"role": "user", "content": [{"type": "input_text", "text": f"U{mark}"}]},
        {"type": "function_call", "call_id": f"c{mark}", "name": f"f{mark}", "arguments": arguments},
        {"type": "function_call_output", "call_id": f"c{mark}", "output": f"T{mark}"},
        {"role": "user", "content": f"P{mark}"}],
        "tools": [{"type": "function", "name": "lookup", "description": f"D{mark}", "parameters": schema}]}
    messages = {"model": "m", "max_tokens": 8, "system": f"S{mark}", "messages": [
        {"role": "user", "content": f"U{mark}"},
        {"role": "assistant", "content": [{"type": "text", "text": f"A{mark}"},
                                          {"type": "tool_use", "id": f"t{mark}", "name": f"f{mark}",
                                           "input": {f"q{mark}": f"v{mark}"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{mark}", "content": f"T{mark}"},
                                     {"type": "text", "text": f"P{mark}"}]},
        {"role": "assistant", "content": f"go on{mark}"}],
        "tools": [{"name": "lookup", "description": f"D{mark}", "input_schema": schema}]}
    return {"chat": ("/v1/chat/completions", chat), "responses": ("/v1/responses", responses),
            "messages": ("/v1/messages", messages)}


def user_requests(mark: str) -> dict[str, tuple[str, dict[str, Any]]]:
    """One user message, for templates that refuse the others (a system text they drop)."""
    return {"chat": ("/v1/chat/completions", {"model": "m", "max_tokens": 8,
                                              "messages": [{"role": "user", "content": f"U{mark}"}]}),
            "responses": ("/v1/responses", {"model": "m", "max_output_tokens": 8, "store": False, "input": f"U{mark}"}),
            "messages": ("/v1/messages", {"model": "m", "max_tokens": 8,
                                          "messages": [{"role": "user", "content": f"U{mark}"}]})}


def simple_requests(mark: str) -> dict[str, tuple[str, dict[str, Any]]]:
    """The same with only system and user text, for templates that refuse the full conversation."""
    return {"chat": ("/v1/chat/completions", {"model": "m", "max_tokens": 8, "messages": [
                {"role": "system", "content": f"S{mark}"}, {"role": "user", "content": f"U{mark}"}]}),
            "responses": ("/v1/responses", {"model": "m", "max_output_tokens": 8, "store": False,
                                            "instructions": f"I{mark}", "input": f"U{mark}"}),
            "messages": ("/v1/messages", {"model": "m", "max_tokens": 8, "system": f"S{mark}",
                                          "messages": [{"role": "user", "content": f"U{mark}"}]})}


# ------------------------------------------------------------------------------ tokenizer files


def _byte_alphabet() -> list[str]:
    from tokenizers.pre_tokenizers import ByteLevel

    return sorted(ByteLevel.alphabet())


def tokenizer_json(vocab: dict[str, int], merges: list[str], specials: dict[int, str]) -> dict[str, Any]:
    """A byte-level BPE ``tokenizer.json`` (GPT-2's pre-tokenization, digits one by one, as SmolLM2's)."""
    return {"version": "1.0", "truncation": None, "padding": None,
            "added_tokens": [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
                              "normalized": False, "special": True} for i, t in sorted(specials.items())],
            "normalizer": None,
            "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                {"type": "Digits", "individual_digits": True},
                {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}]},
            "post_processor": None,
            "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                      "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                      "vocab": vocab, "merges": merges}}


def byte_tokenizer(specials: list[str]) -> dict[str, Any]:
    """A real ``tokenizers`` tokenizer with no merges: every byte a token, ``specials`` ids 0, 1, …"""
    ids = {i: s for i, s in enumerate(specials)}
    vocab = {s: i for i, s in ids.items()}
    for char in _byte_alphabet():
        vocab[char] = len(vocab)
    return tokenizer_json(vocab, [], ids)


def gguf_tokenizer(path: Path) -> dict[str, Any]:
    """SmolLM2's ``tokenizer.json`` rebuilt from its GGUF (vocabulary, merges, control tokens)."""
    from app.gguf import read_vocab

    vocab = read_vocab(path, all_tokens=True, arrays=["tokenizer.ggml.merges"])
    assert vocab.tokens is not None and vocab.meta.get("tokenizer.ggml.pre") == "smollm"
    return tokenizer_json({t: i for i, t in enumerate(vocab.tokens)}, vocab.meta["tokenizer.ggml.merges"],
                          vocab.control)


def model_directory(folder: Path, template: str, tokenizer: dict[str, Any] | None) -> Path:
    """A model directory as ``--chat-template`` takes it: ``chat_template.jinja`` (and ``tokenizer.json``)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "chat_template.jinja").write_text(template, encoding="utf-8")
    if tokenizer is not None:
        (folder / "tokenizer.json").write_text(json.dumps(tokenizer), encoding="utf-8")
    return folder
