"""Kimi K2 tool calls. The call id ``functions.NAME:IDX`` is kept as the OpenAI call id.

    <|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{"city": "Paris"}<|tool_call_end|><|tool_calls_section_end|>

Text between calls inside the section is markup; whitespace around the section is content.
"""

from __future__ import annotations

from parsers.core.namedcall import NamedJsonShape
from parsers.core.programs import named_json_calls
from parsers.function_call import ToolCallDetector
from parsers.wire import WireFormat

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
    start_markers = (SECTIONS[0][0], SECTIONS[1][0], "<|tool_call_begin|>")
    markers = (*SECTIONS[0], *SECTIONS[1], "<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>")
    trim_around_calls = False
    wire = WireFormat("<|tool_call_begin|>functions.$name:$index<|tool_call_argument_begin|>$args<|tool_call_end|>",
                      section=SECTIONS[0])
    body = named_json_calls(
        "<|tool_call_begin|>",
        NamedJsonShape(name_end="<|tool_call_argument_begin|>", call_end="<|tool_call_end|>", split_id=split_kimi_id),
        section=SECTIONS, bare_calls=True)
