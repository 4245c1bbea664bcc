"""Tool calls in Google's object notation (Gemma 4, FunctionGemma), converted to JSON as they stream.

    <|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:3,opts:{metric:true},tags:[<|"|>a<|"|>]}<tool_call|>
    <start_function_call>call:get_weather{city:<escape>Paris<escape>}<end_function_call>

After ``call:`` comes the name (up to ``{``), then an object whose keys are bare text up to ``:``
(they may contain spaces: ``Basic LLM Chain:{…}``; a key written between string delimiters is
accepted too) and whose values are:

* strings between a delimiter token (``<|"|>``, ``<escape>``) — raw text, no escapes; markers inside
  are literal text. Streamed as ``"`` + the JSON-escaped text as it arrives + ``"``;
* objects ``{…}`` and arrays ``[…]`` (elements separated by ``,``, whitespace allowed) — their
  structure streams as it is read;
* bare scalars up to ``,`` ``}`` ``]`` — ``true``/``false``/``null`` (and Python's spellings),
  numbers written by Python's ``str()`` (``1e-05``) — converted once complete. Other bare text
  becomes a JSON string (models sometimes drop the delimiters; SGLang and vLLM read it so too).

One call block may hold several ``call:`` entries (``object_notation`` writes one per block). ``drop`` lists markup removed wherever it
appears outside calls (the stop token after a call, ``<|tool_response>``); ``alt_call_ends`` are
accepted in place of the call's end marker.

Recoveries a shape may declare (Gemma 4 writes all of them): ``loose_prefix`` — after the block
opener, ``:NAME{`` and ``:call:NAME{`` stand for ``call:NAME{``; ``bare_after`` — a ``call:NAME{…}``
whose block opener the model left out is a call where it starts the output or follows one of these
texts (a line break, the end of the thought channel); the block's end marker after it is optional.
A ``call:`` anywhere else (``Note: call:me``), or one not followed by a name and ``{``, is content.
"""

from __future__ import annotations

import json
import re
from collections.abc import Generator
from dataclasses import dataclass

from parsers.core.args import escape
from parsers.core.cursor import Cursor, Write, separated
from parsers.core.driver import Out
from parsers.core.markers import MarkerSet
from parsers.format import CallContext, ToolFormat
from parsers.shapes.pythonic import SCALAR_LIMIT, read_run, scalar_json
from parsers.wire import ObjectNotation, WireFormat, lit

_BARE_VALUE = re.compile(r"[^,{}\[\]<]*")
_BARE_KEY = re.compile(r"[^:,{}\[\]<]*")
MAX_DEPTH = 64


@dataclass(frozen=True)
class ObjNotationShape:
    call_start: str  # "<|tool_call>"
    call_end: str  # "<tool_call|>"
    string_delim: str  # '<|"|>'
    call_prefix: str = "call:"
    drop: tuple[str, ...] = ()  # markup dropped outside calls
    alt_call_ends: tuple[str, ...] = ()  # also end a call block
    loose_prefix: bool = False  # ":NAME{" and ":call:NAME{" after the opener stand for "call:NAME{"
    bare_after: tuple[str, ...] = ()  # a "call:NAME{…}" without the opener is a call after these (or first)

    @property
    def markers(self) -> tuple[str, ...]:
        return (self.call_start, self.call_end, self.string_delim, *self.drop, *self.alt_call_ends)


def obj_string(cur: Cursor, write: Write, delim: str) -> Generator[None, None, bool]:
    """After an opening delimiter: stream the text up to the closing one as a JSON string."""
    write('"')
    if (yield from cur.until(MarkerSet((delim,)), lambda text: write(escape(text)))) is None:
        return False
    write('"')
    return True


def _key(cur: Cursor, delim: str) -> Generator[None, None, str | None]:
    """An object key and its ``:`` (consumed); ``None`` if there is none here."""
    yield from cur.skip_ws()
    if (yield from cur.expect(delim)):
        key, term = yield from cur.read_until(MarkerSet((delim,)), limit=256)
        if term is None:
            return None
    else:
        bare = yield from read_run(cur, _BARE_KEY, 256)
        if bare is None:
            return None
        key = bare.strip()
    yield from cur.skip_ws()
    if not key or not (yield from cur.expect(":")):
        return None
    return key


def obj_value(cur: Cursor, write: Write, delim: str, depth: int = 0) -> Generator[None, None, bool]:
    """Stream one value (after optional whitespace) to ``write`` as JSON."""
    if depth > MAX_DEPTH:
        return False
    yield from cur.skip_ws()
    if (yield from cur.expect(delim)):
        return (yield from obj_string(cur, write, delim))
    if (yield from cur.expect("{")):
        return (yield from obj_object(cur, write, delim, depth))
    if (yield from cur.expect("[")):
        return (yield from _array(cur, write, delim, depth))
    text = yield from read_run(cur, _BARE_VALUE, SCALAR_LIMIT)
    text = text.strip() if text is not None else ""
    if not text:
        return False
    write(scalar_json(text) or json.dumps(text, ensure_ascii=False))
    return True


def obj_object(cur: Cursor, write: Write, delim: str, depth: int = 0) -> Generator[None, None, bool]:
    """After ``{``: the members up to ``}`` as a JSON object."""
    write("{")
    yield from cur.skip_ws()
    if (yield from cur.expect("}")):
        write("}")
        return True

    def member() -> Generator[None, None, bool]:
        key = yield from _key(cur, delim)
        if key is None:
            return False
        write(json.dumps(key, ensure_ascii=False) + ": ")
        return (yield from obj_value(cur, write, delim, depth + 1))

    return (yield from separated(cur, write, "}", member, "}"))


def _array(cur: Cursor, write: Write, delim: str, depth: int) -> Generator[None, None, bool]:
    """After ``[``: the elements up to ``]`` as a JSON array."""
    write("[")
    yield from cur.skip_ws()
    if (yield from cur.expect("]")):
        write("]")
        return True
    return (yield from separated(cur, write, "]", lambda: obj_value(cur, write, delim, depth + 1), "]"))


def obj_call(shape: ObjNotationShape, cur: Cursor, out: Out, name_end: MarkerSet,
             prefixed: bool = False, bare: bool = False) -> Generator[None, None, bool]:
    """One ``call:NAME{…}`` (``prefixed``: its ``call:`` is already consumed). The call must have
    been begun; its header goes out at ``{``, then the arguments stream. Returns ``True`` once the
    arguments object has closed. A ``bare`` call (no block opener) is one only from its ``{`` on:
    text cut off before that is not an unfinished call but text."""
    if not prefixed:
        yield from cur.skip_ws()
        prefixes = (shape.call_prefix, ":" + shape.call_prefix, ":") if shape.loose_prefix else (shape.call_prefix,)
        if (yield from cur.match(prefixes)) is None:
            if cur.eof and shape.call_prefix.startswith(cur.buf[cur.pos:]):
                cur.pos = len(cur.buf)  # cut off inside the prefix: an unfinished call
            return False
    name, term = yield from cur.read_until(name_end, limit=256)
    if term is None and cur.eof and not bare:
        cur.pos = len(cur.buf)  # cut off inside the name: an unfinished call
        return False
    name = name.strip()
    if term != "{" or not name or any(c.isspace() for c in name):
        return False
    out.calls.header(name)
    return (yield from obj_object(cur, out.calls.args, shape.string_delim))


def object_notation(shape: ObjNotationShape, *, trim_around_calls: bool = True) -> ToolFormat:
    """Content, and call blocks ``START call:…{…} [call:…{…}] END``; written one call per block."""
    bare = (shape.call_prefix,) if shape.bare_after else ()
    outer = MarkerSet((shape.call_start, *shape.drop, *bare))
    name_end = MarkerSet(("{", shape.call_start, shape.call_end, shape.string_delim, "\n"))
    block_ends = (shape.call_end, *shape.alt_call_ends)
    tail_len = max((len(t) for t in shape.bare_after), default=0)

    def read(ctx: CallContext, cur: Cursor, out: Out) -> Generator[None, None, None]:
        tail = ""  # the end of the content written so far ("" at the start): where a bare call may stand

        def write(text: str) -> None:
            nonlocal tail
            if text:
                tail = (tail + text)[-tail_len:]
                out.content.write(text)

        while True:
            marker = yield from cur.until(outer, write if bare else out.content.write)
            if marker is None:
                return
            if marker in bare:
                if tail and not tail.endswith(shape.bare_after):
                    write(marker)  # "call:" in prose
                    continue
                out.calls.begin(marker)
                ok = yield from obj_call(shape, cur, out, name_end, prefixed=True, bare=True)
                if ok:
                    yield from cur.skip_ws()
                    yield from cur.match(block_ends)
                    tail = ""
                elif not out.calls.header_sent:
                    tail = marker
                out.calls.end(ok)
                continue
            if marker != shape.call_start:  # dropped markup
                continue
            tail = ""
            out.calls.begin(marker)
            prefixed = False
            while True:
                if not (yield from obj_call(shape, cur, out, name_end, prefixed)):
                    out.calls.end(False)
                    break
                yield from cur.skip_ws()
                after = yield from cur.match((*block_ends, shape.call_prefix))
                if after == shape.call_prefix:
                    out.calls.end(True)
                    out.calls.begin(after)
                    prefixed = True
                    continue
                # no end marker: fine only where the model itself stopped (engines drop stop tokens)
                out.calls.end(after is not None or (cur.eof and cur.available == 0 and not cur.truncated))
                break

    wire = WireFormat(lit(shape.call_start + shape.call_prefix) + "$name$args" + lit(shape.call_end),
                      args=ObjectNotation(shape.string_delim))
    return ToolFormat(read=read, start_markers=(shape.call_start,), markers=shape.markers, wire=wire,
                      trim_around_calls=trim_around_calls)
