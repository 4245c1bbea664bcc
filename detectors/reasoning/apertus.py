"""Swiss AI Apertus reasoning (SGLang's ``apertus2509``): ``<|inner_prefix|> … <|inner_suffix|>``.

    <|inner_prefix|>Need the weather.<|tools_prefix|>[{"get_weather": {"city": "Bern"}}]<|tools_suffix|>

Apertus writes its tool calls inside the reasoning: a ``<|tools_prefix|> … <|tools_suffix|>`` block
there passes on to the tool-call parser as written, and the reasoning resumes after it (the block
may also be the end of the output). A later ``<|inner_prefix|>`` in the answer opens another block.
The template never opens the block in its generation prompt; the model does.
"""

from __future__ import annotations

from parsers.declare import ReasoningDetector


class Apertus(ReasoningDetector):
    start = ("<|inner_prefix|>",)
    end = "<|inner_suffix|>"
    passthrough = (("<|tools_prefix|>", "<|tools_suffix|>"),)
    tool_calls_end_reasoning = False
    reopen = True
