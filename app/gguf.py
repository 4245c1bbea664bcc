"""A GGUF file's metadata (the key–value section before its tensors), read without loading the model.

GGUF (llama.cpp's model format): ``GGUF``, a version (2 or 3), the tensor count and the key–value
count (``uint64`` each), then each key (``uint64`` length + UTF-8) with a ``uint32`` value type and
its value; strings are ``uint64`` length + bytes, arrays an element type, a ``uint64`` count and
the elements. Only what toolwire reads is decoded: the tokenizer's vocabulary and token types
(``tokenizer.ggml.tokens``, ``tokenizer.ggml.token_type``; types: 1 normal, 2 unknown, 3 control,
4 user-defined, 5 unused, 6 byte) and scalars. Our own reader (a few dozen lines) rather than PyPI
``gguf``: that package pulls in numpy for what is a walk over a byte buffer.
"""

from __future__ import annotations

import mmap
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CONTROL, USER_DEFINED = 3, 4

_SCALAR = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_STRING, _ARRAY = 8, 9


class GgufError(ValueError):
    """Not a GGUF file, or one this reader cannot walk."""


@dataclass(frozen=True)
class GgufVocab:
    """A GGUF model's tokens of the special kinds (by type), its BOS / EOS ids, and the rest of the
    metadata read (``meta``: scalars and numeric arrays; ``tokens``: every token when asked)."""

    control: dict[int, str]
    user_defined: dict[int, str]
    meta: dict[str, Any]
    tokens: list[str] | None = None


def read_vocab(path: str | Path, all_tokens: bool = False, arrays: Iterable[str] = ()) -> GgufVocab:
    """The vocabulary's control and user-defined tokens (``all_tokens``: every token too; ``arrays``:
    string arrays to decode into ``meta`` as well, e.g. ``tokenizer.ggml.merges``)."""
    wanted = set(arrays)
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
        if data[:4] != b"GGUF":
            raise GgufError(f"{path} is not a GGUF file")
        version = struct.unpack_from("<I", data, 4)[0]
        if version < 2:
            raise GgufError(f"{path}: GGUF version {version} is not supported")
        count = struct.unpack_from("<Q", data, 16)[0]
        at = 24
        meta: dict[str, Any] = {}
        tokens_at: tuple[int, int] | None = None
        for _ in range(count):
            key, at = _string(data, at)
            kind = struct.unpack_from("<I", data, at)[0]
            at += 4
            if key == "tokenizer.ggml.tokens":
                tokens_at = (at, struct.unpack_from("<Q", data, at + 4)[0])
                at = _skip(data, at, kind)
            elif kind == _ARRAY and struct.unpack_from("<I", data, at)[0] == _STRING and key not in wanted:
                at = _skip(data, at, kind)
            else:
                meta[key], at = _value(data, at, kind)
        types = meta.get("tokenizer.ggml.token_type") or []
        special = {i for i, t in enumerate(types) if t in (CONTROL, USER_DEFINED)}
        tokens: list[str] = []
        if tokens_at is not None:
            tokens = _strings(data, tokens_at[0] + 12, tokens_at[1], None if all_tokens else special)
    control = {i: tokens[i] for i in special if i < len(tokens) and types[i] == CONTROL}
    user = {i: tokens[i] for i in special if i < len(tokens) and types[i] == USER_DEFINED}
    return GgufVocab(control, user, meta, tokens if all_tokens else None)


def _string(data: Any, at: int) -> tuple[str, int]:
    n = struct.unpack_from("<Q", data, at)[0]
    return bytes(data[at + 8:at + 8 + n]).decode("utf-8", "replace"), at + 8 + n


def _strings(data: Any, at: int, count: int, only: set[int] | None) -> list[str]:
    """``count`` strings from ``at`` (those not in ``only`` as ``""``)."""
    out: list[str] = []
    unpack = struct.unpack_from
    for i in range(count):
        n = unpack("<Q", data, at)[0]
        out.append(bytes(data[at + 8:at + 8 + n]).decode("utf-8", "replace") if only is None or i in only else "")
        at += 8 + n
    return out


def _value(data: Any, at: int, kind: int) -> tuple[Any, int]:
    if kind == _STRING:
        return _string(data, at)
    if kind == _ARRAY:
        element, n = struct.unpack_from("<IQ", data, at)
        at += 12
        if element in _SCALAR:
            code = _SCALAR[element]
            size = struct.calcsize(code)
            return list(struct.unpack_from(f"<{n}{code}", data, at)), at + n * size
        if element == _STRING:
            return _strings(data, at, n, None), _skip_strings(data, at, n)
        items = []
        for _ in range(n):
            item, at = _value(data, at, element)
            items.append(item)
        return items, at
    if kind not in _SCALAR:
        raise GgufError(f"unknown GGUF value type {kind}")
    code = _SCALAR[kind]
    return struct.unpack_from("<" + code, data, at)[0], at + struct.calcsize(code)


def _skip_strings(data: Any, at: int, count: int) -> int:
    unpack = struct.unpack_from
    for _ in range(count):
        at += 8 + unpack("<Q", data, at)[0]
    return at


def _skip(data: Any, at: int, kind: int) -> int:
    if kind == _ARRAY:
        element, n = struct.unpack_from("<IQ", data, at)
        at += 12
        if element == _STRING:
            return _skip_strings(data, at, int(n))
        if element in _SCALAR:
            return at + int(n) * struct.calcsize(_SCALAR[element])
        for _ in range(n):
            at = _skip(data, at, element)
        return at
    end: int = _value(data, at, kind)[1]
    return end
