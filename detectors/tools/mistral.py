"""Mistral tool calls, both generations of the wire format.

    [TOOL_CALLS] [{"name": "f", "arguments": {...}}, {"name": "g", "arguments": {...}}]   (v3 tokenizers)
    [TOOL_CALLS]f[ARGS]{...}[TOOL_CALLS]g[ARGS]{...}                                      (v11+)
    [TOOL_CALLS]f[CALL_ID]a1b2c3d4e[ARGS]{...}                                            (Mistral Small 3.2)
"""

from __future__ import annotations

from collections.abc import Generator

from detectors.turns import MISTRAL
from parsers.declare import (
    DEFAULT_SHAPE,
    CallContext,
    Cursor,
    MarkerSet,
    Opener,
    Out,
    ToolCallDetector,
    ToolFormat,
    WireFormat,
    json_args_object,
    json_block,
    lit,
)

TOOL_CALLS = "[TOOL_CALLS]"
ARGS = "[ARGS]"
CALL_ID = "[CALL_ID]"
_START = MarkerSet((TOOL_CALLS,))
_STOP = MarkerSet((TOOL_CALLS, ARGS, CALL_ID))
_NAME_END = MarkerSet((ARGS, CALL_ID))
_ID_END = MarkerSet((ARGS,))
_JSON = Opener(lone_object=True)


def _read(ctx: CallContext, cur: Cursor, out: Out) -> Generator[None, None, None]:
    while True:
        marker = yield from cur.until(_START, out.content.write)
        if marker is None:
            return
        lead = [marker]
        yield from cur.skip_ws(lead.append)
        if (yield from cur.peek()) in ("[", "{"):  # v3: a JSON list (or one call object)
            yield from json_block(cur, out, "".join(lead), _JSON, DEFAULT_SHAPE, _STOP)
        else:
            out.calls.begin("".join(lead))
            yield from _named_call(cur, out)


def _named_call(cur: Cursor, out: Out) -> Generator[None, None, None]:
    name, sep = yield from cur.read_until(_NAME_END, limit=256)
    name = name.strip()
    call_id = None
    if sep == CALL_ID:
        call_id, sep = yield from cur.read_until(_ID_END, limit=128)
        call_id = call_id.strip()
    if sep is None or not name:
        out.calls.end(False)
        return
    out.calls.header(name, call_id or None)
    ok = yield from json_args_object(cur, out, _STOP)
    out.calls.end(ok)


class Mistral(ToolCallDetector):
    end_tokens = MISTRAL
    # written in the v11+ spelling: one ``[TOOL_CALLS]NAME[ARGS]{…}`` per call
    format = ToolFormat(read=_read, start_markers=(TOOL_CALLS,), markers=(TOOL_CALLS, ARGS, CALL_ID),
                        wire=WireFormat(lit(TOOL_CALLS) + "$name" + lit(ARGS) + "$args"))
