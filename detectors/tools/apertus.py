"""Swiss AI Apertus tool calls: a JSON list of single-key objects, the key being the tool name.

    Let me look that up.<|tools_prefix|>[{"get_weather": {"city": "Bern"}}, {"get_time": {}}]<|tools_suffix|>

Each element is ``{"NAME": {arguments}}``; the arguments stream through as written (a JSON
string holding the object, as the template renders ``arguments|tojson``, is decoded). A single
object without the list brackets is accepted. The closing ``<|tools_suffix|>`` may be missing
where the model itself ended the output (a stop string).
"""

from __future__ import annotations

from collections.abc import Generator

from detectors.turns import APERTUS
from parsers.declare import (
    CallContext,
    Cursor,
    JsonCallShape,
    MarkerSet,
    Out,
    ToolCallDetector,
    ToolFormat,
    WireFormat,
    call_template,
    json_calls,
    lit,
)

PREFIX, SUFFIX = "<|tools_prefix|>", "<|tools_suffix|>"
SHAPE = JsonCallShape(name_keys=(), args_keys=(), nest_keys=(), name_is_key=True)
_START = MarkerSet((PREFIX,))
_STOP = MarkerSet((PREFIX, SUFFIX))


def _read(ctx: CallContext, cur: Cursor, out: Out) -> Generator[None, None, None]:
    while True:
        marker = yield from cur.until(_START, out.content.write)
        if marker is None:
            return
        out.calls.begin(marker)
        if (yield from json_calls(cur, out, SHAPE, _STOP)):
            yield from cur.closing(SUFFIX)


class Apertus(ToolCallDetector):
    end_tokens = APERTUS
    format = ToolFormat(read=_read, start_markers=(PREFIX,), markers=(PREFIX, SUFFIX),
                        wire=WireFormat(call_template(SHAPE), section=(lit(PREFIX + "["), lit("]" + SUFFIX)),
                                        separator=", "))
