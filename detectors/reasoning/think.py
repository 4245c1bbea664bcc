"""``<think>…</think>`` reasoning (Qwen3, QwQ, DeepSeek-R1 and many more).

* ``qwen3`` — the model opens ``<think>`` itself unless the prompt already did; with thinking
  disabled the template closes an empty block in the prompt.
* ``qwen3-thinking`` — Qwen3 thinking-only models (2507): the template opens ``<think>`` in the
  prompt, so output starts inside reasoning.
* ``deepseek-r1`` — DeepSeek-R1 and its distills: output starts inside reasoning (the template
  prefills ``<think>\\n``); text before ``</think>`` is reasoning.
"""

from __future__ import annotations

from parsers.reasoning import ReasoningDetector


class Qwen3(ReasoningDetector):
    start = ("<think>",)
    end = "</think>"


class Qwen3Thinking(Qwen3):
    force_reasoning = True


class DeepSeekR1(Qwen3):
    force_reasoning = True
