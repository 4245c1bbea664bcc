"""MiniMax-M3 reasoning: ``<mm:think> … </mm:think>``.

The template opens the block in the generation prompt only with ``thinking_mode: "enabled"`` (the
prompt's tail decides the start state); in adaptive mode the model opens it itself, and an answer
without thinking may begin with a bare ``</mm:think>`` (the template writes one before every
earlier non-thinking answer) — a closing marker at the very start is markup, never content.
"""

from __future__ import annotations

from detectors.turns import MINIMAX
from parsers.declare import ReasoningDetector


class MinimaxM3(ReasoningDetector):
    start = ("<mm:think>",)
    end = "</mm:think>"
    prompt_may_open = True  # thinking_mode "enabled": the generation prompt opens <mm:think>
    end_tokens = MINIMAX
