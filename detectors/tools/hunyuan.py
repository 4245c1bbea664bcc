"""Tencent Hunyuan tool calls: a ``<tool_calls>`` section holding a JSON list or key/value calls.

    <tool_calls>[{"name": "get_weather", "arguments": {"city": "Paris"}}]</tool_calls>   (Hunyuan-A13B)

    <tool_calls:opensource>
    <tool_call:opensource>get_weather<tool_sep:opensource>
    <arg_key:opensource>city</arg_key:opensource>
    <arg_value:opensource>Paris</arg_value:opensource>
    </tool_call:opensource>
    </tool_calls:opensource>                                                         (Hy3)

Hy3's special tokens carry a tokenizer-wide suffix (``:opensource`` in the shipped template;
none in the preview tokenizer): the suffix written on ``<tool_calls…>`` is used for every tag of
that section. After the section opener, ``[`` means the A13B JSON list (arguments stream through
as written); otherwise the section holds Hy3 calls, whose values are typed by the tool's JSON
schema and taken as written (the template renders non-string values as JSON). Text between calls
inside a section is markup.
"""

from __future__ import annotations

from collections.abc import Generator
from functools import lru_cache

from detectors.turns import HUNYUAN
from parsers.declare import (
    CallContext,
    Cursor,
    JsonCallShape,
    MarkerSet,
    Out,
    ToolCallDetector,
    ToolFormat,
    XmlArgs,
    XmlCallShape,
    json_call_list,
    section_calls,
    xml_call,
    xml_wire,
)

SECTION = "<tool_calls"  # + optional ":SUFFIX" + ">"
SUFFIXES = ("", ":opensource")  # the spellings listed in ``markers`` (any suffix is parsed)
WRITTEN_SUFFIX = ":opensource"  # the shipped Hy3 template's
JSON_SHAPE = JsonCallShape()
_OPEN = MarkerSet((SECTION,))
_TAG_END = MarkerSet((">",))


def _tags(suffix: str) -> tuple[str, ...]:
    names = ("tool_calls", "tool_call", "tool_sep", "arg_key", "arg_value")
    return tuple(f"<{n}{suffix}>" for n in names) + tuple(f"</{n}{suffix}>" for n in names if n != "tool_sep")


def _shape(suffix: str) -> XmlCallShape:
    return XmlCallShape(
        name_end=(f"<tool_sep{suffix}>",), call_end=f"</tool_call{suffix}>",
        args=XmlArgs(f"<arg_key{suffix}>", f"</arg_key{suffix}>", f"</arg_value{suffix}>",
                     value_start=f"<arg_value{suffix}>", value_breaks=(f"</tool_call{suffix}>",)))


@lru_cache(maxsize=8)  # the suffix comes from the output: keep the cache bounded
def _section(suffix: str) -> tuple[str, MarkerSet, MarkerSet, XmlCallShape]:
    """For one token suffix: (section end, markers inside the section, JSON stop markers, call shape)."""
    end, call = f"</tool_calls{suffix}>", f"<tool_call{suffix}>"
    return end, MarkerSet((call, end)), MarkerSet((f"<tool_calls{suffix}>", end)), _shape(suffix)


def _valid_suffix(text: str) -> bool:
    return text == "" or (text.startswith(":") and len(text) > 1 and not any(c in text for c in " \t\r\n<"))


def _read(ctx: CallContext, cur: Cursor, out: Out) -> Generator[None, None, None]:
    while True:
        marker = yield from cur.until(_OPEN, out.content.write)
        if marker is None:
            return
        out.calls.begin(marker)  # records the opener, in case it turns out not to be one
        suffix, term = yield from cur.read_until(_TAG_END, limit=32)
        if term is None or not _valid_suffix(suffix):
            out.calls.end(False)  # "<tool_calls" in plain text
            continue
        end, inside, stop, shape = _section(suffix)
        yield from cur.skip_ws()
        if (yield from cur.peek()) == "[":
            if (yield from json_call_list(cur, out, JSON_SHAPE, stop)):
                yield from cur.closing(end)
            continue
        out.calls.cancel()
        yield from _xml_section(ctx, cur, out, end, inside, shape)


def _xml_section(ctx: CallContext, cur: Cursor, out: Out, end: str, inside: MarkerSet,
                 shape: XmlCallShape) -> Generator[None, None, None]:
    """Hy3 calls up to the section end; after a malformed call the rest is content again."""

    def call(_: str) -> Generator[None, None, bool]:
        return (yield from xml_call(shape, ctx.tools_by_name, cur, out))

    yield from section_calls(cur, out, inside, end, call)


class Hunyuan(ToolCallDetector):
    end_tokens = HUNYUAN
    # written as the Hy3 template writes calls (the A13B JSON list is read too)
    format = ToolFormat(
        read=_read, start_markers=tuple(f"<tool_calls{s}>" for s in SUFFIXES),
        markers=tuple(m for s in SUFFIXES for m in _tags(s)), sniff=lambda text: SECTION in text,
        wire=xml_wire(f"<tool_call{WRITTEN_SUFFIX}>", _shape(WRITTEN_SUFFIX),
                      (f"<tool_calls{WRITTEN_SUFFIX}>", f"</tool_calls{WRITTEN_SUFFIX}>")))
