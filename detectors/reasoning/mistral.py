"""Mistral reasoning (Magistral, Ministral-3 Reasoning, Mistral Small 4): ``[THINK] … [/THINK]``.

Reasoning is optional: the model opens ``[THINK]`` itself when it reasons."""

from __future__ import annotations

from parsers.reasoning import ReasoningDetector


class Mistral(ReasoningDetector):
    start = ("[THINK]",)
    end = "[/THINK]"
