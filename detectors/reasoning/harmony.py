"""gpt-oss (Harmony) as a reasoning parser alone: ``analysis`` messages are reasoning, the rest content.

    <|channel|>analysis<|message|>Simple arithmetic.<|end|><|start|>assistant<|channel|>final<|message|>4.

→ reasoning ``Simple arithmetic.``, content ``4.``. It runs the same Harmony program as the
``gpt-oss`` tool parser (``parsers.shapes.harmony``) with tool calls disabled: a call message's body
(``to=functions.NAME``) is passed through as content, as the model wrote it (the client asked for
no tool parsing, and text is never lost); calls to built-in tools are dropped as there.

The start state comes from the prompt's tail (``initial_state``): after ``<|start|>assistant`` the
output begins with a header; a prompt ending in ``<|channel|>analysis<|message|>`` starts inside
reasoning (as does ``force_reasoning``). The tool parser's ``stop_markers`` play no part: Harmony
messages say themselves where they end.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar

from parsers.declare import (
    ANALYSIS_BODY,
    BEAM,
    CHANNEL,
    END,
    GENERATION_PROMPT,
    HARMONY,
    MESSAGE,
    Dialect,
    Program,
    ReasoningDetector,
    Start,
    harmony_program,
    parse_header,
    start_from_prompt,
)


class GptOssReasoning(ReasoningDetector):
    dialect: ClassVar[Dialect] = HARMONY
    start = (CHANNEL + "analysis" + MESSAGE,)
    end = END
    _start: Start = GENERATION_PROMPT

    @classmethod
    def markers(cls) -> tuple[str, ...]:
        return cls.dialect.markers

    def initial_state(self, prompt: str | None) -> bool | None:
        """True when the prompt leaves the output inside an ``analysis`` body; None without a prompt."""
        self._start = start_from_prompt(prompt)
        if not prompt:
            return None
        start = self._start
        return start.in_body and parse_header(start.prefix, start.opened, self.dialect).channel == "analysis"

    def make_program(self, in_reasoning: bool, stop_markers: Iterable[str] = ()) -> Program:
        start = self._start
        if in_reasoning and not start.in_body:
            start = ANALYSIS_BODY
        elif not in_reasoning and start.in_body:
            start = GENERATION_PROMPT
        return harmony_program(self.dialect, start, calls=False)


class BeamReasoning(GptOssReasoning):
    """Beam's envelope (``detectors.tools.beam``) as a reasoning parser alone: ``analysis`` messages
    are reasoning; a call message's XML body passes through as content, as written."""

    dialect = BEAM
