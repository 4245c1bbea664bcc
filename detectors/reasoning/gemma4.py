"""Gemma 4 reasoning: the thought channel ``<|channel>thought\\n … <channel|>``.

With thinking off the template closes an empty channel in the prompt (``<|channel>thought\\n<channel|>``);
with thinking on the model opens it. Gemma 4 interleaves thinking and tool calls in one turn
(``<|channel>thought\\n…<channel|><|tool_call>…<tool_call|><|channel>thought\\n…<channel|>…``): a
thought channel opened later in the answer is reasoning too, and a stray ``<channel|>`` there is
markup. A tool call's text (to ``<tool_call|>``, not counting one inside a ``<|"|>`` string) is passed
on as written: the markers may be text of its arguments."""

from __future__ import annotations

from detectors.turns import GEMMA4
from parsers.declare import ReasoningDetector


class Gemma4(ReasoningDetector):
    start = ("<|channel>thought", "<|channel>")
    end = "<channel|>"
    end_tokens = GEMMA4
    reopen = True
    answer_calls = (("<|tool_call>", ("<tool_call|>", "<turn|>"), '<|"|>'),)
