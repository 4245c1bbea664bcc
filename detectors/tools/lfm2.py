"""LFM2 / LFM2.5 (Liquid AI) tool calls: a pythonic call list between special tokens.

    <|tool_call_start|>[get_weather(city="Paris"), get_time()]<|tool_call_end|>
    <|tool_call_start|>[search(query='café', filters={"open": true})]<|tool_call_end|>   (LFM2.5 renders dicts as JSON)
    <|tool_call_start|>[{"name": "get_weather", "arguments": {"city": "Paris"}}]<|tool_call_end|>

Arguments are converted to JSON as they stream (``parsers.shapes.pythonic``); a JSON call list (or a
single JSON call object) inside the tokens streams as written. A single call without brackets is
accepted. LFM2 sometimes echoes a block's body after its end token (``…]<|tool_call_end|>[f(a=1)]``,
often with a second end token): the echo — the same text, with or without the list's brackets,
followed by an end token, the next block or the end of the output — is dropped, the call kept.
An orphan ``<|tool_call_end|>`` is markup.
"""

from __future__ import annotations

from collections.abc import Generator

from detectors.turns import CHATML
from parsers.declare import (
    DEFAULT_SHAPE,
    CallContext,
    Cursor,
    MarkerSet,
    Out,
    ToolCallDetector,
    ToolFormat,
    json_call,
    json_call_list,
    peek_past_ws,
    python_call_lines,
    python_call_list,
    python_list_wire,
)

START, END = "<|tool_call_start|>", "<|tool_call_end|>"
_OUTER = MarkerSet((START, END))
_SPACING = 64  # whitespace looked through around an echo


def _block(cur: Cursor, out: Out) -> Generator[None, None, bool]:
    """After ``<|tool_call_start|>`` (the first call begun): the calls, then the end token.
    Whether the block was well formed."""
    first, at = yield from peek_past_ws(cur)
    if first == "[" and (yield from peek_past_ws(cur, at + 1))[0] == "{":
        return (yield from json_call_list(cur, out, DEFAULT_SHAPE, _OUTER)) and (yield from cur.closing(END))
    if first == "{":
        ok = (yield from json_call(cur, out, DEFAULT_SHAPE, _OUTER)) and (yield from cur.closing(END))
        out.calls.end(ok)
        return ok
    yield from cur.skip_ws()
    if (yield from cur.expect("[")):
        return (yield from python_call_list(cur, out)) and (yield from cur.closing(END))
    return (yield from python_call_lines(cur, out, END))


def _literal_at(cur: Cursor, at: int, literal: str) -> Generator[None, None, bool]:
    """Whether ``literal`` is the text at ``cur.pos + at`` (nothing consumed; each character
    compared once, however the text arrives)."""
    done = 0
    while True:
        start = cur.pos + at + done
        n = min(len(cur.buf) - start, len(literal) - done)
        if n > 0:
            if cur.buf[start:start + n] != literal[done:done + n]:
                return False
            done += n
        if done == len(literal):
            return True
        if cur.eof:
            return False
        yield


def _echo(cur: Cursor, bodies: tuple[str, ...]) -> Generator[None, None, int]:
    """How many characters at the cursor echo the block just read: whitespace, one of ``bodies``,
    whitespace, then an end token (counted), the next block or the end of the output (not
    counted); 0 when what follows is not an echo. Nothing is consumed."""
    first, at = yield from peek_past_ws(cur, 0, _SPACING)
    if not first:
        return 0
    for body in bodies:
        if (yield from _literal_at(cur, at, body)):
            break
    else:
        return 0
    after, at = yield from peek_past_ws(cur, at + len(body), _SPACING)
    if not after:
        return cur.available if cur.eof else 0
    if (yield from _literal_at(cur, at, END)):
        return at + len(END)
    return at if (yield from _literal_at(cur, at, START)) else 0


def _bodies(block: str) -> tuple[str, ...]:
    """How an echo of a block's source (start token excluded, end token included) may be written."""
    body = block.strip().removesuffix(END).strip()
    if body.startswith("[") and body.endswith("]"):
        return body, body[1:-1].strip()
    return (body,) if body else ()


def _read(ctx: CallContext, cur: Cursor, out: Out) -> Generator[None, None, None]:
    while True:
        marker = yield from cur.until(_OUTER, out.content.write)
        if marker is None:
            return
        if marker == END:  # an orphan end token: dropped
            continue
        out.calls.begin(marker)
        cur.tap()
        ok = yield from _block(cur, out)
        bodies = _bodies(cur.tapped())
        if ok and bodies:
            echo = yield from _echo(cur, bodies)
            cur.pos += echo  # (read after the yields: the buffer may have moved)


class Lfm2(ToolCallDetector):
    end_tokens = CHATML
    format = ToolFormat(read=_read, start_markers=(START,), markers=(START, END),
                        wire=python_list_wire(START + "[", "]" + END))
