"""Cohere Command R7B / Command A / Cohere2 tool calls: a JSON list inside an action block.

    <|START_THINKING|>I will look up the weather.<|END_THINKING|><|START_ACTION|>[
        {"tool_call_id": "0", "tool_name": "get_weather", "parameters": {"city": "Paris"}},
        {"tool_call_id": "1", "tool_name": "get_time", "parameters": {}}
    ]<|END_ACTION|>

Each element names the tool in ``tool_name`` and holds its arguments in ``parameters``; the
arguments stream through as written. The model's ``tool_call_id`` ("0", "1", …) is a position
within one turn, not an id: it is dropped and the server assigns unique ids (the chat templates
renumber calls by position, so reusing "0" across turns would pair results with the wrong call).

Answers are wrapped in ``<|START_RESPONSE|>…<|END_RESPONSE|>`` (Command R7B) or
``<|START_TEXT|>…<|END_TEXT|>`` (Command A): that envelope is the format's content markup —
its markers and the whitespace next to them are dropped from the content, the text between them
is content — with or without the ``cohere`` reasoning parser, which owns
``<|START_THINKING|>…<|END_THINKING|>`` and runs before this one.
"""

from __future__ import annotations

from detectors.turns import COHERE
from parsers.declare import JsonCallShape, Opener, ToolCallDetector, WireFormat, json_list, lit

START_ACTION, END_ACTION = "<|START_ACTION|>", "<|END_ACTION|>"
#: answer wrappers (R7B, Command A): markup around content, dropped
TEXT_MARKERS = ("<|START_RESPONSE|>", "<|END_RESPONSE|>", "<|START_TEXT|>", "<|END_TEXT|>")
SHAPE = JsonCallShape(name_keys=("tool_name", "name"), args_keys=("parameters", "arguments"))

#: as the chat template writes calls: the list one call per line, positions as ``tool_call_id``
WIRE = WireFormat('{"tool_call_id": "$index", "tool_name": "$name", "parameters": $args}',
                  section=(lit(START_ACTION + "[\n    "), lit("\n]" + END_ACTION)), separator=",\n    ")


class Cohere(ToolCallDetector):
    end_tokens = COHERE
    format = json_list({START_ACTION: Opener(closer=END_ACTION)}, SHAPE, write=START_ACTION,
                       wire=WIRE).with_content_markup(*TEXT_MARKERS)
