"""FunctionGemma (google/functiongemma-270m-it) tool calls: Gemma's object notation with
``<escape>`` string delimiters.

    <start_function_call>call:get_current_weather{location:<escape>Tokyo, Japan<escape>}<end_function_call>
    <start_function_call>call:set_alarm{hour:7,repeat:true,days:[<escape>mon<escape>]}<end_function_call>

Parallel calls are one block each. ``<start_function_response>`` is the engine's stop sequence after
calls; if it is passed through, it is markup.
"""

from __future__ import annotations

from detectors.turns import GEMMA
from parsers.declare import ObjNotationShape, ToolCallDetector, object_notation

SHAPE = ObjNotationShape(
    call_start="<start_function_call>", call_end="<end_function_call>", string_delim="<escape>",
    drop=("<start_function_response>",))


class FunctionGemma(ToolCallDetector):
    end_tokens = GEMMA
    format = object_notation(SHAPE)
