"""Kimi (K1.5 / Kimi-VL thinking) reasoning: ``◁think▷ … ◁/think▷``."""

from __future__ import annotations

from detectors.turns import KIMI, KIMI_K3
from parsers.declare import ReasoningDetector


class Kimi(ReasoningDetector):
    start = ("◁think▷",)
    end = "◁/think▷"
    end_tokens = KIMI


class KimiK3(ReasoningDetector):
    """Kimi K3 XTML: ``<|open|>think<|sep|> … <|close|>think<|sep|>``, then the answer inside
    ``<|open|>response<|sep|> … <|close|>response<|sep|>`` (markup), then an optional tools element.
    The thinking-mode generation prompt opens the think element, so output starts inside it."""

    start = ("<|open|>think<|sep|>",)
    end = "<|close|>think<|sep|>"
    content_markup = ("<|open|>response<|sep|>", "<|close|>response<|sep|>", "<|close|>message<|sep|>")
    force_reasoning = True
    end_tokens = KIMI_K3
