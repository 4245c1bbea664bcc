"""Tencent Hunyuan reasoning: ``<think>…</think>``, spelled with Hy3's token suffix where it has one.

    <think:opensource>Need the weather.</think:opensource><tool_calls:opensource>…   (Hy3)
    <think>Need the weather.</think>…                                               (A13B, Hy3 preview)

The shipped Hy3 template opens the block in the generation prompt (``reasoning_effort`` low or
high) or closes it there (``no_think``); the prompt's tail decides the start state. A tool-call
section (``<tool_calls…>``) inside an open block ends it, as the ``hunyuan`` tool parser's start
marker."""

from __future__ import annotations

from parsers.declare import ReasoningDetector


class Hunyuan(ReasoningDetector):
    start = ("<think:opensource>", "<think>")
    end = ("</think:opensource>", "</think>")
