"""Cohere Command R7B / Command A reasoning.

    <|START_THINKING|>…<|END_THINKING|><|START_RESPONSE|>answer<|END_RESPONSE|>   (Command R7B)
    …<|END_THINKING|><|START_TEXT|>answer<|END_TEXT|>                              (Command A; the
                                                                                    template opens the thinking block)

The answer wrappers are markup; an action block (``<|START_ACTION|>``) passes on to the tool parser."""

from __future__ import annotations

from parsers.declare import ReasoningDetector


class Cohere(ReasoningDetector):
    start = ("<|START_THINKING|>",)
    end = "<|END_THINKING|>"
    content_markup = ("<|START_RESPONSE|>", "<|END_RESPONSE|>", "<|START_TEXT|>", "<|END_TEXT|>")
