"""Cohere Command R7B / Command A / Command 4 reasoning.

    <|START_THINKING|>…<|END_THINKING|><|START_RESPONSE|>answer<|END_RESPONSE|>   (Command R7B)
    …<|END_THINKING|><|START_TEXT|>answer<|END_TEXT|>                              (Command A; the
                                                                                    template opens the thinking block)

The answer wrappers are markup; an action block (``<|START_ACTION|>``) passes on to the tool parser.
``cohere_command4`` (Command 4, cohere2_moe) is the same format starting inside the thinking block
when the prompt is not known: its template opens ``<|START_THINKING|>`` in the generation prompt
(and closes it there too when ``reasoning=False``, which the prompt's tail shows)."""

from __future__ import annotations

from detectors.turns import COHERE
from parsers.declare import ReasoningDetector


class Cohere(ReasoningDetector):
    start = ("<|START_THINKING|>",)
    end = "<|END_THINKING|>"
    content_markup = ("<|START_RESPONSE|>", "<|END_RESPONSE|>", "<|START_TEXT|>", "<|END_TEXT|>")
    prompt_may_open = True  # Cohere2 (Command A): the generation prompt opens <|START_THINKING|>
    end_tokens = COHERE


class CohereCommand4(Cohere):
    force_reasoning = True
