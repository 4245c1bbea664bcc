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
from typing import Any

from parsers.core.channels import TextChannel
from parsers.core.cursor import Cursor
from parsers.core.jsoncall import json_args_object
from parsers.core.markers import MarkerSet
from parsers.core.program import Out
from parsers.core.sections import marker_calls
from parsers.core.xmlcall import escape, schema_type
from parsers.function_call import ToolCallDetector
from parsers.wire import WireFormat

PYTHON = "python"
CONTENT_RECIPIENT = "all"
_NAME_CHARS = re.compile(r"[\w.-]*")


def read_name(cur: Cursor, end: str, limit: int = 128) -> Generator[None, None, str | None]:
    """Consume ``NAME`` + the one-character ``end`` and return ``NAME`` (letters, digits, ``_``,
    ``.``, ``-``; at most ``limit``); ``None``, consuming nothing, when the text is not that.
    Each resumption rescans at most ``limit`` characters."""
    while True:
        buf, pos = cur.buf, cur.pos
        stop = _NAME_CHARS.match(buf, pos, pos + limit + 1).end()
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


def code_key(tools: Mapping[str, Any]) -> str:
    """The arguments key for raw Python code: the only string parameter of an offered ``python``
    tool, else ``code``."""
    tool = tools.get(PYTHON)
    params = getattr(tool, "parameters", None)
    props = params.get("properties") if isinstance(params, Mapping) else None
    if isinstance(props, Mapping):
        strings = [k for k, v in props.items() if schema_type(v) == "string"]
        if len(strings) == 1:
            return str(strings[0])
    return "code"


def code_call(detector: Any, cur: Cursor, out: Out, end: MarkerSet | None,
              trim_trailing: bool) -> Generator[None, None, tuple[bool, str | None]]:
    """A ``python`` call whose arguments are the raw code that follows, JSON-escaped as it
    streams, up to ``end`` (consumed, and returned) or the end of the output. Returns whether
    the call is complete and the marker that ended it."""
    out.calls.header(PYTHON)
    out.calls.args('{"' + escape(code_key(detector.tools_by_name)) + '": "')
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


def _v31_call(detector: Any, cur: Cursor, out: Out, marker: str) -> Generator[None, None, bool]:
    if marker == PYTHON_TAG:
        ok, _ = yield from code_call(detector, cur, out, None, trim_trailing=False)
        return ok
    name = yield from read_name(cur, ">")
    if name is None:
        return False
    out.calls.header(name)
    if not (yield from json_args_object(cur, out, _V31_STOP)):
        return False
    return (yield from cur.closing(FUNCTION_END))


class FunctionaryV31(ToolCallDetector):
    start_markers = (FUNCTION, PYTHON_TAG)
    markers = (FUNCTION, FUNCTION_END, PYTHON_TAG)
    wire = WireFormat("<function=$name>$args</function>")
    body = marker_calls((FUNCTION, PYTHON_TAG), _v31_call)


# ---------------------------------------------------------------------------------- v3.2

SEP = ">>>"
_SEP = MarkerSet((SEP,))


class FunctionaryV32(ToolCallDetector):
    start_markers = (SEP,)
    markers = (SEP,)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: whether the output starts with a recipient (the prompt ended with ``>>>``); ``None``:
        #: unknown, a recipient line at the very start is recognised by its shape
        self.recipient_first: bool | None = None

    def prepare(self, prompt: str | None) -> None:
        self.recipient_first = None if prompt is None else prompt.endswith(SEP)

    def body(self, cur: Cursor, out: Out) -> Generator[None, None, Any]:
        marker: str | None = None
        if self.recipient_first is not False:
            lead = yield from cur.match((SEP,))
            marker = yield from self._segment(cur, out, lead or "")
        while True:
            if marker is None:
                marker = yield from cur.until(_SEP, out.content.write)
                if marker is None:
                    return
            marker = yield from self._segment(cur, out, marker)

    def _segment(self, cur: Cursor, out: Out, marker: str) -> Generator[None, None, str | None]:
        """One ``RECIPIENT\\n…`` segment after ``marker``. Returns the separator when raw code
        ran up to the next one (consumed), else ``None`` (the text that follows is content)."""
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
            ok, sep = yield from code_call(self, cur, out, _SEP, trim_trailing=True)
            out.calls.end(ok)
            return sep
        yield from cur.skip_ws()
        if (yield from cur.peek()) != "{":
            out.calls.end(False)
            return None
        out.calls.header(name)
        out.calls.end((yield from json_args_object(cur, out, _SEP)))
        return None
