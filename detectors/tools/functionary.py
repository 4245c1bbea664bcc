"""MeetKai Functionary v3 tool calls (Llama 3 based), both generations.

v3.1 (``functionary-*-v3.1``): calls are ``<function=NAME>{json}</function>`` anywhere in the
text; Python code for the code interpreter follows ``<|python_tag|>`` raw, up to the end:

    Let me check.<function=get_weather>{"city": "Paris"}</function><function=get_time>{}</function>
    <|python_tag|>import math
    print(math.pi)

v3.2 (``functionary-*-v3.2``): the turn is a sequence of ``>>>RECIPIENT\\n…`` segments. The
recipient ``all`` carries text for the user, any other recipient is a call with JSON arguments,
and ``python`` may carry raw code instead. The chat template ends the prompt with ``>>>``, so
the first recipient comes without it:

    all
    Let me check.>>>get_weather
    {"city": "Paris"}>>>python
    print(2 ** 10)

Raw code becomes a ``python`` call whose arguments are ``{"code": CODE}`` (as llama.cpp does;
the key is the single string parameter of an offered ``python`` tool when there is one). v3.2
code ends at the next ``>>>`` and its trailing whitespace is dropped (Functionary strips every
segment); v3.1 code runs to the end of the output as written. Code cut off at the token limit is
not a call.
"""

from __future__ import annotations

import re
from collections.abc import Generator, Mapping

from detectors.turns import LLAMA3
from parsers.declare import (
    CallContext,
    Cursor,
    MarkerSet,
    Out,
    TextChannel,
    ToolCallDetector,
    ToolFormat,
    ToolSpec,
    WireFormat,
    calls_format,
    escape,
    json_args_object,
    schema_type,
)

PYTHON = "python"
CONTENT_RECIPIENT = "all"
_NAME_CHARS = re.compile(r"[\w./-]*")  # tool names: MCP's characters (``/`` too)


def read_name(cur: Cursor, end: str, limit: int = 128) -> Generator[None, None, str | None]:
    """Consume ``NAME`` + the one-character ``end`` and return ``NAME`` (letters, digits, ``_``,
    ``.``, ``-``, ``/``; at most ``limit``); ``None``, consuming nothing, when the text is not that.
    Each resumption rescans at most ``limit`` characters."""
    while True:
        buf, pos = cur.buf, cur.pos
        stop = _NAME_CHARS.match(buf, pos, pos + limit + 1).end()  # type: ignore[union-attr]  # matches ""
        if stop - pos > limit:
            return None
        if stop < len(buf):
            if stop == pos or buf[stop] != end:
                return None
            cur.pos = stop + 1
            return buf[pos:stop]
        if cur.eof:
            return None
        yield


def code_key(tools: Mapping[str, ToolSpec]) -> str:
    """The arguments key for raw Python code: the only string parameter of an offered ``python``
    tool, else ``code``."""
    tool = tools.get(PYTHON)
    props = tool.parameters.get("properties") if tool is not None else None
    if isinstance(props, Mapping):
        strings = [k for k, v in props.items() if schema_type(v) == "string"]
        if len(strings) == 1:
            return str(strings[0])
    return "code"


def code_call(ctx: CallContext, cur: Cursor, out: Out, end: MarkerSet | None,
              trim_trailing: bool) -> Generator[None, None, tuple[bool, str | None]]:
    """A ``python`` call whose arguments are the raw code that follows, JSON-escaped as it
    streams, up to ``end`` (consumed, and returned) or the end of the output. Returns whether
    the call is complete and the marker that ended it."""
    out.calls.header(PYTHON)
    out.calls.args('{"' + escape(code_key(ctx.tools_by_name)) + '": "')
    code = TextChannel(lambda text: out.calls.args(escape(text)), trim_before_boundary=trim_trailing)
    if end is None:
        yield from cur.rest(code.write)
        marker = None
    else:
        marker = yield from cur.until(end, code.write)
    code.boundary()
    out.calls.args('"}')
    return (marker is not None or not cur.truncated), marker


# ---------------------------------------------------------------------------------- v3.1

FUNCTION, FUNCTION_END, PYTHON_TAG = "<function=", "</function>", "<|python_tag|>"
_V31_STOP = MarkerSet((FUNCTION, FUNCTION_END, PYTHON_TAG))


def _v31_call(ctx: CallContext, cur: Cursor, out: Out, marker: str) -> Generator[None, None, bool]:
    if marker == PYTHON_TAG:
        ok, _ = yield from code_call(ctx, cur, out, None, trim_trailing=False)
        return ok
    name = yield from read_name(cur, ">")
    if name is None:
        return False
    out.calls.header(name)
    if not (yield from json_args_object(cur, out, _V31_STOP)):
        return False
    return (yield from cur.closing(FUNCTION_END))


class FunctionaryV31(ToolCallDetector):
    end_tokens = LLAMA3
    format = calls_format((FUNCTION, PYTHON_TAG), _v31_call, markers=(FUNCTION_END,),
                          wire=WireFormat("<function=$name>$args</function>"))


# ---------------------------------------------------------------------------------- v3.2

SEP = ">>>"
_SEP = MarkerSet((SEP,))


def _v32_read(ctx: CallContext, cur: Cursor, out: Out) -> Generator[None, None, None]:
    # whether the output starts with a recipient (the prompt ended with ``>>>``); ``None``:
    # unknown, a recipient line at the very start is recognised by its shape
    recipient_first = None if ctx.prompt is None else ctx.prompt.endswith(SEP)
    marker: str | None = None
    if recipient_first is not False:
        lead = yield from cur.match((SEP,))
        marker = yield from _segment(ctx, cur, out, lead or "")
    while True:
        if marker is None:
            marker = yield from cur.until(_SEP, out.content.write)
            if marker is None:
                return
        marker = yield from _segment(ctx, cur, out, marker)


def _segment(ctx: CallContext, cur: Cursor, out: Out, marker: str) -> Generator[None, None, str | None]:
    """One ``RECIPIENT\\n…`` segment after ``marker``. Returns the separator when raw code ran up
    to the next one (consumed), else ``None`` (the text that follows is content)."""
    out.calls.begin(marker)
    name = yield from read_name(cur, "\n")
    if name is None:
        out.calls.end(False)
        return None
    if name == CONTENT_RECIPIENT:
        out.calls.cancel()
        out.content.boundary()
        return None
    first = yield from cur.peek()
    if name == PYTHON and first != "{":
        ok, sep = yield from code_call(ctx, cur, out, _SEP, trim_trailing=True)
        out.calls.end(ok)
        return sep
    yield from cur.skip_ws()
    if (yield from cur.peek()) != "{":
        out.calls.end(False)
        return None
    out.calls.header(name)
    out.calls.end((yield from json_args_object(cur, out, _SEP)))
    return None


class FunctionaryV32(ToolCallDetector):
    end_tokens = LLAMA3
    # the prompt ends with ``>>>``: the first call is ``NAME\n{…}``, a further one ``>>>NAME\n{…}``
    # (as llama.cpp writes them); no distinctive first word, so no lazy grammar
    format = ToolFormat(read=_v32_read, start_markers=(SEP,),
                        wire=WireFormat("$name\n$args", separator=SEP, trigger_word=""))
