"""``app.gguf``: a GGUF file's vocabulary read from its metadata (a small file written here, in GGUF's
layout; the real SmolLM2 file is read in the end-to-end tier)."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import pytest

from app.gguf import CONTROL, USER_DEFINED, GgufError, read_vocab
from app.vocab import from_gguf

STRING, ARRAY, UINT32, INT32, FLOAT32, BOOL = 8, 9, 4, 5, 6, 7


def _string(text: str) -> bytes:
    data = text.encode()
    return struct.pack("<Q", len(data)) + data


def _value(kind: int, value: Any) -> bytes:
    if kind == STRING:
        return _string(value)
    if kind == ARRAY:
        element, items = value
        body = b"".join(_value(element, item) for item in items)
        return struct.pack("<IQ", element, len(items)) + body
    return struct.pack({UINT32: "<I", INT32: "<i", FLOAT32: "<f", BOOL: "<?"}[kind], value)


def write_gguf(path: Path, pairs: list[tuple[str, int, Any]]) -> Path:
    head = b"GGUF" + struct.pack("<IQQ", 3, 0, len(pairs))
    body = b"".join(_string(key) + struct.pack("<I", kind) + _value(kind, value) for key, kind, value in pairs)
    path.write_bytes(head + body + b"\0" * 64)  # tensor data would follow
    return path


TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "a", "b", "<tool_call>", "  ", "<think>"]
TYPES = [CONTROL, CONTROL, CONTROL, 1, 1, USER_DEFINED, USER_DEFINED, USER_DEFINED]


@pytest.fixture
def model(tmp_path: Path) -> Path:
    return write_gguf(tmp_path / "m.gguf", [
        ("general.architecture", STRING, "llama"),
        ("general.alignment", UINT32, 32),
        ("llama.rope.freq_base", FLOAT32, 10000.0),
        ("general.tags", ARRAY, (STRING, ["a", "b"])),
        ("tokenizer.ggml.model", STRING, "gpt2"),
        ("tokenizer.ggml.tokens", ARRAY, (STRING, TOKENS)),
        ("tokenizer.ggml.token_type", ARRAY, (INT32, TYPES)),
        ("tokenizer.ggml.merges", ARRAY, (STRING, ["a b"])),
        ("tokenizer.ggml.add_bos_token", BOOL, False),
        ("tokenizer.ggml.bos_token_id", UINT32, 1),
        ("tokenizer.chat_template", STRING, "{{ '<tool_call>' }}"),
    ])


def test_the_vocabulary_s_special_tokens_and_scalars(model: Path) -> None:
    vocab = read_vocab(model)
    assert vocab.control == {0: "<|endoftext|>", 1: "<|im_start|>", 2: "<|im_end|>"}
    assert vocab.user_defined == {5: "<tool_call>", 6: "  ", 7: "<think>"}
    assert vocab.meta["tokenizer.ggml.bos_token_id"] == 1 and vocab.meta["general.alignment"] == 32
    assert vocab.meta["tokenizer.chat_template"] == "{{ '<tool_call>' }}"
    assert "tokenizer.ggml.merges" not in vocab.meta and vocab.tokens is None  # not decoded unless asked
    everything = read_vocab(model, all_tokens=True, arrays=["tokenizer.ggml.merges"])
    assert everything.tokens == TOKENS and everything.meta["tokenizer.ggml.merges"] == ["a b"]


def test_control_strings_from_a_gguf(model: Path) -> None:
    vocab = from_gguf(model, {"<tool_call>"})
    assert vocab.control == {"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "<think>"}
    # llama.cpp matches user-defined tokens even in plain-text tokenization: they cannot be sent as text
    assert vocab.unsplittable == {"<tool_call>", "<think>"}  # markup only: a run of spaces is ordinary text


def test_not_a_gguf(tmp_path: Path) -> None:
    (tmp_path / "x.gguf").write_bytes(b"GGML" + b"\0" * 64)
    with pytest.raises(GgufError):
        read_vocab(tmp_path / "x.gguf")
