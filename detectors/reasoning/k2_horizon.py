"""K2 Horizon (IFM) reasoning: ``<ifm|think> … </ifm|think>``, one tag pair per reasoning effort.

``reasoning_effort`` high / medium / low selects ``<ifm|think>``, ``<ifm|think_fast>`` or
``<ifm|think_faster>`` (each closed by its ``</…>``). The template opens the block in the
generation prompt (``<|ifm|im_start|>assistant\\n<ifm|think>\\n``), so output starts inside it;
a prompt that closed an empty block (``<ifm|think>\\n</ifm|think>\\n``) starts outside. A tool
call (``<ifm|tool_calls>``) ends an unclosed block.
"""

from __future__ import annotations

from parsers.declare import ReasoningDetector


class K2Horizon(ReasoningDetector):
    start = ("<ifm|think>", "<ifm|think_fast>", "<ifm|think_faster>")
    end = ("</ifm|think>", "</ifm|think_fast>", "</ifm|think_faster>")
    force_reasoning = True
