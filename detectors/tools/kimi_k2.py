"""Kimi K2 tool calls. The call id ``functions.NAME:IDX`` is kept as the OpenAI call id.

    <|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{"city": "Paris"}<|tool_call_end|><|tool_calls_section_end|>

Text between calls inside the section is markup; whitespace around the section is content. Calls
written without the section's opener (starting at ``<|tool_call_begin|>``) are read as if it were
there: whitespace between them and the stray ``<|tool_calls_section_end|>`` after them are markup.
"""

from __future__ import annotations

from detectors.turns import KIMI
from parsers.declare import NamedJsonShape, ToolCallDetector, named_json

SECTIONS = (("<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"),
            ("<|tool_call_section_begin|>", "<|tool_call_section_end|>"))


def split_kimi_id(text: str) -> tuple[str, str | None]:
    """``functions.get_weather:0`` → (``get_weather``, ``functions.get_weather:0``)."""
    call_id = text
    name = text.removeprefix("functions.")
    head, sep, tail = name.rpartition(":")
    if sep and tail.isdigit():
        name = head
    return name, call_id


class KimiK2(ToolCallDetector):
    end_tokens = KIMI
    format = named_json(
        "<|tool_call_begin|>",
        NamedJsonShape(name_end="<|tool_call_argument_begin|>", call_end="<|tool_call_end|>", split_id=split_kimi_id),
        section=SECTIONS, bare_calls=True, name_template="functions.$name:$index", trim_around_calls=False)
