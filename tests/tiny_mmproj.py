"""A tiny multimodal projector (``mmproj`` GGUF) for a text model, written here from nothing.

No trained projector for SmolLM2 can be had offline (see README, "Images and documents"), so the
end-to-end tier makes one: a one-block SigLIP-shaped vision tower and Gemma 3's projector (average
pool, RMS norm, one matrix into the LLM's embedding space) — the layout llama.cpp's ``clip.cpp``
loads for ``clip.projector_type = gemma3`` — with small deterministic pseudo-random weights. It
gives llama-server real vision input to run (image decoding, the tower, the projection, the
embeddings placed at the media marker): the model sees an image, but an untrained one — what it
"sees" means nothing, so tests check the path, not the answer's content.

GGUF (version 3) is written by hand: header, key/values, tensor infos, data aligned to 32 bytes,
every tensor F32. Dimensions are in ggml's order (the fastest-varying first).
"""

from __future__ import annotations

import random
import struct
from pathlib import Path

ALIGN = 32
_U32, _F32, _BOOL, _STRING, _ARRAY = 4, 6, 7, 8, 9


def _string(text: str) -> bytes:
    data = text.encode()
    return struct.pack("<Q", len(data)) + data


def _value(value: object) -> bytes:
    if isinstance(value, bool):
        return struct.pack("<I?", _BOOL, value)
    if isinstance(value, int):
        return struct.pack("<II", _U32, value)
    if isinstance(value, float):
        return struct.pack("<If", _F32, value)
    if isinstance(value, str):
        return struct.pack("<I", _STRING) + _string(value)
    if isinstance(value, list):
        return struct.pack("<IIQ", _ARRAY, _F32, len(value)) + b"".join(struct.pack("<f", v) for v in value)
    raise TypeError(type(value))


def write_tiny_mmproj(path: Path, llm_embd: int, image_size: int = 56, patch: int = 14, embd: int = 16,
                      ffn: int = 32, heads: int = 2, merge: int = 2, seed: int = 0) -> Path:
    """Write the projector to ``path`` for an LLM whose embeddings are ``llm_embd`` wide; an image
    becomes ``(image_size / patch / merge)²`` tokens (4 by default)."""
    rng = random.Random(seed)
    n_pos = (image_size // patch) ** 2
    tensors: list[tuple[str, tuple[int, ...], list[float]]] = []

    def add(name: str, dims: tuple[int, ...], scale: float = 0.02, constant: float | None = None) -> None:
        count = 1
        for d in dims:
            count *= d
        values = [constant] * count if constant is not None else [rng.gauss(0.0, scale) for _ in range(count)]
        tensors.append((name, dims, values))

    add("v.patch_embd.weight", (patch, patch, 3, embd))
    add("v.patch_embd.bias", (embd,), constant=0.0)
    add("v.position_embd.weight", (embd, n_pos))
    for kind in ("q", "k", "v", "out"):
        add(f"v.blk.0.attn_{kind}.weight", (embd, embd))
        add(f"v.blk.0.attn_{kind}.bias", (embd,), constant=0.0)
    for norm in ("ln1", "ln2"):
        add(f"v.blk.0.{norm}.weight", (embd,), constant=1.0)
        add(f"v.blk.0.{norm}.bias", (embd,), constant=0.0)
    add("v.blk.0.ffn_up.weight", (embd, ffn))
    add("v.blk.0.ffn_up.bias", (ffn,), constant=0.0)
    add("v.blk.0.ffn_down.weight", (ffn, embd))
    add("v.blk.0.ffn_down.bias", (embd,), constant=0.0)
    add("v.post_ln.weight", (embd,), constant=1.0)
    add("v.post_ln.bias", (embd,), constant=0.0)
    add("mm.input_projection.weight", (llm_embd, embd))
    add("mm.soft_emb_norm.weight", (embd,), constant=1.0)

    meta: dict[str, object] = {
        "general.architecture": "clip", "general.name": "toolwire tiny test projector",
        "clip.projector_type": "gemma3", "clip.has_vision_encoder": True, "clip.has_text_encoder": False,
        "clip.use_gelu": True, "clip.vision.image_size": image_size, "clip.vision.patch_size": patch,
        "clip.vision.embedding_length": embd, "clip.vision.feed_forward_length": ffn,
        "clip.vision.projection_dim": llm_embd, "clip.vision.block_count": 1,
        "clip.vision.attention.head_count": heads, "clip.vision.attention.layer_norm_epsilon": 1e-6,
        "clip.vision.image_mean": [0.5, 0.5, 0.5], "clip.vision.image_std": [0.5, 0.5, 0.5],
        "clip.vision.projector.scale_factor": merge,
    }
    head = struct.pack("<4sIQQ", b"GGUF", 3, len(tensors), len(meta))
    head += b"".join(_string(key) + _value(value) for key, value in meta.items())
    offset = 0
    datas = []
    for name, dims, values in tensors:
        head += _string(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        head += struct.pack("<IQ", 0, offset)  # F32
        data = struct.pack(f"<{len(values)}f", *values)
        data += b"\0" * (-len(data) % ALIGN)
        datas.append(data)
        offset += len(data)
    head += b"\0" * (-len(head) % ALIGN)
    path.write_bytes(head + b"".join(datas))
    return path
