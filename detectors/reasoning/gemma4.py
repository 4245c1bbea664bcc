"""Gemma 4 reasoning: the thought channel ``<|channel>thought\\n … <channel|>``.

With thinking off the template closes an empty channel in the prompt (``<|channel>thought\\n<channel|>``);
with thinking on the model opens it."""

from __future__ import annotations

from detectors.turns import GEMMA4
from parsers.declare import ReasoningDetector


class Gemma4(ReasoningDetector):
    start = ("<|channel>thought", "<|channel>")
    end = "<channel|>"
    end_tokens = GEMMA4
