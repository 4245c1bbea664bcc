"""Gemma 4 tool calls: Google's object notation between ``<|tool_call>`` and ``<tool_call|>``.

    <|tool_call>call:get_weather{city:<|"|>Paris<|"|>,unit:<|"|>c<|"|>}<tool_call|>
    <|tool_call>call:create_event{attendees:[{email:<|"|>ana@x.com<|"|>,optional:false}],tz:null}<tool_call|>

Keys are bare; strings sit between ``<|"|>`` tokens, unescaped (see ``parsers.shapes.objnotation``).
Generation stops on ``<|tool_response>`` (or ``<turn|>``, which some checkpoints write in place of
``<tool_call|>``); if an engine passes either through, it is markup. Text before and after a call is
content as written (the template renders an assistant's text after its calls).

Real Gemma 4 output also opens calls loosely: ``<|tool_call>:get_weather{…}`` and
``<|tool_call>:call:get_weather{…}`` (the ``call`` keyword dropped or a stray colon), and a bare
``call:get_weather{…}`` with no opener at the start of the answer, of a line or right after the
thought channel's ``<channel|>``; all are calls. ``call:`` elsewhere in prose stays content.
"""

from __future__ import annotations

from detectors.turns import GEMMA4
from parsers.declare import ObjNotationShape, ToolCallDetector, object_notation

SHAPE = ObjNotationShape(
    call_start="<|tool_call>", call_end="<tool_call|>", string_delim='<|"|>',
    drop=("<|tool_response>",), alt_call_ends=("<turn|>",),
    loose_prefix=True, bare_after=("\n", "<channel|>"))


class Gemma4(ToolCallDetector):
    end_tokens = GEMMA4
    format = object_notation(SHAPE, trim_around_calls=False)
