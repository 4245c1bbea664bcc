"""Mistral reasoning (Magistral, Ministral-3 Reasoning, Mistral Small 4): ``[THINK] … [/THINK]``.

Reasoning is optional: the model opens ``[THINK]`` itself when it reasons. The block is delimited
by control tokens, so ``[TOOL_CALLS]`` text inside it is reasoning, not a call. Magistral Small
2506 (v11 tokenizer) writes plain-text ``<think> … </think>`` instead."""

from __future__ import annotations

from detectors.turns import MISTRAL
from parsers.declare import ReasoningDetector


class Mistral(ReasoningDetector):
    start = ("[THINK]", "<think>")
    end = ("[/THINK]", "</think>")
    tool_calls_end_reasoning = False
    end_tokens = MISTRAL
