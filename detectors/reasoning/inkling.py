"""Inkling as a reasoning parser alone: thinking blocks are reasoning, every other block content.

    <|message_model|><|content_thinking|>Simple arithmetic.<|end_message|><|message_model|><|content_text|>4.<|end_message|>

→ reasoning ``Simple arithmetic.``, content ``4.``. It runs the ``inkling`` tool format's program
(``parsers.shapes.blocks``) with calls disabled: a call block's JSON payload is content, as written.
The prompt's tail says whether the output begins inside a block the prompt opened.
"""

from __future__ import annotations

from collections.abc import Iterable

from parsers.declare import INKLING, Program, ReasoningDetector, blocks_program, start_kind


class Inkling(ReasoningDetector):
    start = ("<|content_thinking|>",)
    end = "<|end_message|>"
    _start: str | None = None

    @classmethod
    def markers(cls) -> tuple[str, ...]:
        return INKLING.markers

    def initial_state(self, prompt: str | None) -> bool | None:
        """True when the prompt opened a thinking block; None without a prompt."""
        self._start = start_kind(INKLING, prompt)
        if not prompt:
            return None
        return self._start == "reasoning"

    def make_program(self, in_reasoning: bool | None, stop_markers: Iterable[str] = ()) -> Program:
        start = self._start
        if in_reasoning:
            start = "reasoning"
        elif start == "reasoning":
            start = None
        return blocks_program(INKLING, start, calls=False)
