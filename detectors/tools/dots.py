"""dots (rednote hi lab) tool calls: ``invoke`` elements inside ``<dots_function_call>`` blocks.

    <dots_function_call>
    <invoke name="search">
    <parameter name="query">weather in Shanghai</parameter>
    </invoke>
    </dots_function_call>

A block may hold several invokes, and an output several blocks. Names and keys may be written
without their quotes (``<invoke name=search>``). Values are stripped of surrounding whitespace and
typed by the tool's JSON schema (strings as written, other types as JSON; text that does not parse
stays a string). A block holding a JSON object instead (``{"name": "search", "arguments": {…}}``)
is one call whose arguments stream through as written. Reasoning is ``<think>…</think>`` (the
``dots`` reasoning alias of ``qwen3``).
"""

from __future__ import annotations

from collections.abc import Generator

from parsers.declare import (
    DEFAULT_SHAPE,
    CallContext,
    Cursor,
    MarkerSet,
    Opener,
    Out,
    ToolCallDetector,
    ToolFormat,
    XmlArgs,
    XmlCallShape,
    json_block,
    section_calls,
    xml_call,
    xml_wire,
)

BLOCK, BLOCK_END = "<dots_function_call>", "</dots_function_call>"
INVOKE, INVOKE_END, PARAM, PARAM_END = "<invoke name=", "</invoke>", "<parameter name=", "</parameter>"
#: as read: names and keys quoted or bare, values stripped
SHAPE = XmlCallShape(name_end=(">",), call_end=INVOKE_END, unquote_name=True,
                     args=XmlArgs(PARAM, ">", PARAM_END, strip=True, unquote_key=True))
#: as written: quoted names and keys
WRITTEN = XmlCallShape(name_end=('">',), call_end=INVOKE_END,
                       args=XmlArgs(PARAM + '"', '">', PARAM_END, strip=True))
_OPEN = MarkerSet((BLOCK,))
_INSIDE = MarkerSet((INVOKE, BLOCK_END))
_JSON_STOP = MarkerSet((BLOCK, BLOCK_END))
_JSON = Opener(closer=BLOCK_END, lone_object=True, lists=False)


def _read(ctx: CallContext, cur: Cursor, out: Out) -> Generator[None, None, None]:
    def invoke(_: str) -> Generator[None, None, bool]:
        return (yield from xml_call(SHAPE, ctx.tools_by_name, cur, out))

    while True:
        marker = yield from cur.until(_OPEN, out.content.write)
        if marker is None:
            return
        lead = [marker]
        yield from cur.skip_ws(lead.append)
        if (yield from cur.peek()) == "{":  # one JSON call; the opener is passed through if it fails
            yield from json_block(cur, out, "".join(lead), _JSON, DEFAULT_SHAPE, _JSON_STOP)
            continue
        yield from section_calls(cur, out, _INSIDE, BLOCK_END, invoke)


class Dots(ToolCallDetector):
    format = ToolFormat(read=_read, start_markers=(BLOCK,), markers=(BLOCK_END, INVOKE, INVOKE_END, PARAM, PARAM_END),
                        wire=xml_wire(INVOKE + '"', WRITTEN, (BLOCK, BLOCK_END)))
