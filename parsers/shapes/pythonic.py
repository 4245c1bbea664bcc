"""Tool calls written as Python calls, converted to JSON arguments as they stream.

    [get_weather(city="Paris", days=3), get_time()]                   (Llama 3.2 / Llama 4 pythonic)
    <|python_start|>[get_weather(city='Paris')]<|python_end|>          (Llama 4)
    <|tool_call_start|>[search(query='café', limit=5)]<|tool_call_end|> (LFM2)
    <function_calls>get_weather(city="Paris")\\nget_time()</function_calls> (Olmo 3)

A call is ``NAME(KEY=VALUE, …)`` with keyword arguments only; ``NAME`` is a Python name, dotted or
not, or any tool name in MCP's characters (``user-profile/update``, ``2fa.check``): a grammar makes a
model write the name exactly as it was offered. Values are
Python literals — strings (``'…'``, ``"…"``, triple-quoted, ``r``/``u``/``b``/``f`` prefixes, Python
escapes), numbers, ``True``/``False``/``None`` (and the JSON spellings ``true``/``false``/``null``,
which Olmo 3 and LFM2.5 write), lists, tuples and sets (→ JSON arrays) and dicts (→ objects) —
converted to JSON incrementally:

* the arguments object opens with the first key (``{"city": ``) and closes at ``)``;
* a string value is written ``"`` + the JSON-escaped text as it arrives + ``"``;
* containers stream their structure (``[``, ``, ``, ``]``) with their elements;
* a number or constant is converted once it is complete (it is short).

Nothing is re-parsed per chunk: every character is examined a bounded number of times.

A quote ends a string only where the string can end — when what follows (after optional
whitespace) is ``,`` ``)`` ``]`` ``}`` ``:`` or the end of the output. For a keyword argument's own
string value that is sharper: the call must be able to go on there — ``,`` and then ``KEY=`` or
``)``, or ``)`` and then what may follow the call (in a list ``,`` or ``]``; in a run of lines
another call, after ``,`` / ``;`` or not, or a marker ``<``) or the end of the output.
Models write unescaped apostrophes and nested quotes (``city='Martha's Vineyard'``,
``cmd='sed -n '1,9p' f'``, ``cmd='python3 -c "print(latex(x, mul_symbol='\\,'))"'`` — there the
quote before ``))"`` cannot end the string, as ``)`` cannot follow a call's ``)``); those stay part
of the text. Raw newlines inside a one-line string are kept as newlines.

``call_head`` decides, without consuming anything, whether a call starts at the cursor: the name,
``(`` and then ``)`` or ``KEY =``. Formats that find their call list in free text (a bare ``[``)
use it so that a bracket in prose stays prose.
"""

from __future__ import annotations

import json
import math
import re
import unicodedata
from collections.abc import Generator

from parsers.core.args import ArgsObject, escape
from parsers.core.cursor import Cursor, Write, separated
from parsers.core.driver import Out
from parsers.wire import PYTHON_KWARGS, WireFormat, lit

_WS = "[ \\t\\r\\n]*"
#: a call's name (see the module docstring)
CALL_NAME = r"[\w./-]+"
_KEY = r"[^\W\d]\w*"
_HEAD = re.compile(rf"{_WS}(?P<name>{CALL_NAME}){_WS}(?P<open>\(){_WS}(?:\)|{_KEY}{_WS}=)")
# every proper prefix of a call head (to tell "not yet" from "never")
_HEAD_PREFIX = re.compile(rf"{_WS}(?:{CALL_NAME}(?:{_WS}(?:\({_WS}(?:{_KEY}{_WS})?)?)?)?")
_IDENT = re.compile(_KEY)
# after a keyword argument's string value and ``,``: the next ``KEY =`` (not ``==``), and its prefixes
_NEXT_KEY = re.compile(rf"{_KEY}{_WS}=(?!=)")
_NEXT_KEY_PREFIX = re.compile(rf"(?:{_KEY}{_WS}=?)?")
# after the call's ``)``: another call (``NAME(``), and its prefixes
_NEXT_CALL = re.compile(rf"{CALL_NAME}{_WS}\(")
_NEXT_CALL_PREFIX = re.compile(rf"(?:{CALL_NAME}{_WS})?")
#: what may follow a call's ``)``: in a list, ``,`` or ``]``; in a run of lines, ``,`` ``;`` an end
#: marker (``<``) or another call
IN_LIST, IN_LINES = (",]", False), (",;<", True)
Follow = tuple[str, bool]
LOOKAHEAD = 256  # characters looked through to decide whether a keyword argument's string ends
_NON_WS = re.compile(r"[^ \t\r\n]")
# a scalar's characters; a sign only at the start or after an exponent ``e``
_SCALAR = re.compile(r"[+-]?(?:[\w.]|(?<=[eE])[+-])*")
_DECIMAL = re.compile(r"[+-]?(?:\d(?:_?\d)*(?:\.(?:\d(?:_?\d)*)?)?|\.\d(?:_?\d)*)(?:[eE][+-]?\d(?:_?\d)*)?")
_INTEGER = re.compile(r"[+-]?(?:\d(?:_?\d)*|0[xX](?:_?[0-9a-fA-F])+|0[oO](?:_?[0-7])+|0[bB](?:_?[01])+)")

_CONSTANTS = {"True": "true", "true": "true", "False": "false", "false": "false", "None": "null", "null": "null"}
_STRING_PREFIXES = frozenset({"r", "u", "b", "f", "br", "rb", "fr", "rf"})
_STRING_CLOSERS = frozenset(",)]}:")
_SIMPLE_ESCAPES = {"\\": "\\", "'": "'", '"': '"', "a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r",
                   "t": "\t", "v": "\v"}
_HEX_ESCAPES = {"x": 2, "u": 4, "U": 8}
_OCTAL = "01234567"
_HEX = frozenset("0123456789abcdefABCDEF")

MAX_DEPTH = 64
SCALAR_LIMIT = 512


# ---------------------------------------------------------------------------------- scalars


def scalar_json(text: str) -> str | None:
    """JSON text for a Python (or JSON) number or constant, or ``None`` if it is neither.

    ``1_000`` → ``1000``, ``0x1F`` → ``31``, ``07`` → ``7`` (models zero-pad), ``.5`` → ``0.5``,
    ``1e-05`` → ``1e-05``, ``True`` → ``true``, ``None`` → ``null``. Non-finite numbers are not JSON.
    """
    constant = _CONSTANTS.get(text)
    if constant is not None:
        return constant
    if _INTEGER.fullmatch(text):
        try:
            return str(int(text, 0))
        except ValueError:
            return str(int(text, 10))  # zero-padded decimal: 07
    if _DECIMAL.fullmatch(text):
        value = float(text)
        if math.isfinite(value):
            return json.dumps(value)
    return None


def read_run(cur: Cursor, chars: re.Pattern[str] = _SCALAR,
             limit: int = SCALAR_LIMIT) -> Generator[None, None, str | None]:
    """Consume and return a run of ``chars`` once it is complete; ``None`` (nothing consumed) if
    the run is empty or longer than ``limit``."""
    while True:
        buf, pos = cur.buf, cur.pos
        found = chars.match(buf, pos)
        end = found.end() if found is not None else pos
        if end - pos > limit:
            return None
        if end < len(buf) or cur.eof:
            if end == pos:
                return None
            cur.pos = end
            return buf[pos:end]
        yield


# ---------------------------------------------------------------------------------- strings


def _code_point(cp: int) -> str:
    """One decoded code point as JSON string text (surrogates as ``\\uXXXX`` escapes, which JSON
    readers pair up)."""
    if 0xD800 <= cp <= 0xDFFF:
        return f"\\u{cp:04x}"
    return escape(chr(cp))


def _escape_sequence(buf: str, i: int, eof: bool) -> tuple[str, int] | None:  # noqa: C901 — Python's string escapes: one branch per escape kind
    """Decode the Python escape sequence at ``buf[i]`` (a backslash) into JSON string text.
    Returns ``(json_text, length)``, or ``None`` when the buffer ends before it is decidable.
    A sequence Python would not accept is kept as written (backslash included)."""
    n = len(buf)
    if i + 1 >= n:
        return None if not eof else ("\\\\", 1)
    c = buf[i + 1]
    literal = ("\\\\" + escape(c), 2)
    if c == "\n":
        return "", 2
    if c == "\r":
        if i + 2 >= n and not eof:
            return None
        return "", 3 if buf.startswith("\n", i + 2) else 2
    simple = _SIMPLE_ESCAPES.get(c)
    if simple is not None:
        return escape(simple), 2
    if c in _OCTAL:
        j = i + 1
        while j < n and j < i + 4 and buf[j] in _OCTAL:
            j += 1
        if j < i + 4 and j == n and not eof:
            return None
        return _code_point(int(buf[i + 1:j], 8)), j - i
    width = _HEX_ESCAPES.get(c)
    if width is not None:
        digits = buf[i + 2:i + 2 + width]
        if len(digits) < width and not eof and all(d in _HEX for d in digits):
            return None
        if len(digits) == width and all(d in _HEX for d in digits):
            cp = int(digits, 16)
            if cp <= 0x10FFFF:
                return _code_point(cp), 2 + width
        return literal
    if c == "N":
        close = buf.find("}", i + 2, i + 100)
        if close == -1:
            return None if not eof and n - i < 100 else literal
        if buf.startswith("{", i + 2):
            try:
                return escape(unicodedata.lookup(buf[i + 3:close])), close + 1 - i
            except KeyError:
                pass
        return literal
    return literal


def _matches_at(cur: Cursor, at: int, full: re.Pattern[str], prefix: re.Pattern[str]) -> Generator[None, None, bool]:
    """Whether ``full`` matches at ``cur.pos + at`` (nothing consumed); waits while the text there
    is still a prefix of a match (``prefix`` reaches the end of the buffer), up to ``LOOKAHEAD``."""
    while True:
        buf = cur.buf
        start = cur.pos + at
        if full.match(buf, start) is not None:
            return True
        found = prefix.match(buf, start)
        if cur.eof or found is None or found.end() < len(buf) or len(buf) - start > LOOKAHEAD:
            return False
        yield


def _kwarg_string_ends(cur: Cursor, at: int, follow: Follow) -> Generator[None, None, bool]:
    """Whether a keyword argument's string value may end with the quote just before
    ``cur.pos + at``: what follows lets the call go on (see the module docstring; ``follow``:
    what may come after the call). Nothing is consumed; past ``LOOKAHEAD`` characters of
    whitespace it may."""
    first, at = yield from peek_past_ws(cur, at, LOOKAHEAD)
    if not first:
        return True
    second, at2 = yield from peek_past_ws(cur, at + 1, LOOKAHEAD)
    if first == ",":
        return not second or second == ")" or (yield from _matches_at(cur, at2, _NEXT_KEY, _NEXT_KEY_PREFIX))
    if first == ")":
        chars, lines = follow
        if not second or second not in chars or not lines or second == "<":
            return not second or second in chars or (lines and (yield from _next_call(cur, at2)))
        third, at3 = yield from peek_past_ws(cur, at2 + 1, LOOKAHEAD)  # lines: after , or ; comes a call
        return not third or third == "<" or (yield from _next_call(cur, at3))
    return False


def _next_call(cur: Cursor, at: int) -> Generator[None, None, bool]:
    return (yield from _matches_at(cur, at, _NEXT_CALL, _NEXT_CALL_PREFIX))


def py_string(cur: Cursor, write: Write, raw: bool = False, kwarg: Follow | None = None) -> Generator[None, None, bool]:  # noqa: C901 — Python's string literals: prefixes, quotes and escapes, read in one pass
    """Stream the Python string literal at the cursor (at its opening quote, after any prefix) to
    ``write`` as one JSON string. Returns ``True`` once the string has closed (see the module
    docstring for when a quote closes it; ``kwarg``: the string is a keyword argument's whole
    value, and what may follow its call), ``False`` if the output ends first."""
    quote = (yield from cur.peek())
    if quote not in ("'", '"'):
        return False
    cur.pos += 1
    triple = (yield from cur.peek(2)) == quote * 2
    if triple:
        cur.pos += 2
    special = re.compile("[" + re.escape(quote) + "\\\\]")
    write('"')
    while True:
        buf, pos = cur.buf, cur.pos
        found = special.search(buf, pos)
        end = found.start() if found is not None else len(buf)
        if end > pos:
            write(escape(buf[pos:end]))
            cur.pos = end
        if found is None:
            if cur.eof:
                return False
            yield
            continue
        if found.group() == "\\":
            if raw:  # a raw string keeps the backslash and the character after it
                if end + 1 >= len(buf) and not cur.eof:
                    yield
                    continue
                write(escape(buf[end:end + 2]))
                cur.pos = min(end + 2, len(buf))
                continue
            decoded = _escape_sequence(buf, end, cur.eof)
            if decoded is None:
                yield
                continue
            text, length = decoded
            write(text)
            cur.pos = end + length
            continue
        if triple:
            if buf.startswith(quote * 3, end):
                cur.pos = end + 3
                write('"')
                return True
            if len(buf) - end < 3 and not cur.eof and quote * (len(buf) - end) == buf[end:]:
                yield
                continue
            write(escape(quote))
            cur.pos = end + 1
            continue
        # a one-line string: does this quote end it? Look past whitespace.
        if kwarg is not None:
            closes = yield from _kwarg_string_ends(cur, 1, kwarg)
            cur.pos += 1
            write('"' if closes else escape(quote))
            if closes:
                return True
            continue
        cur.pos = end + 1
        held = [quote]
        more = yield from cur.skip_ws(held.append)
        if not more or cur.buf[cur.pos] in _STRING_CLOSERS:
            write('"')
            return True
        write(escape("".join(held)))


# ---------------------------------------------------------------------------------- values


def py_value(cur: Cursor, write: Write, depth: int = 0, kwarg: Follow | None = None) -> Generator[None, None, bool]:
    """Stream one Python literal at the cursor (not at whitespace) to ``write`` as JSON.
    Returns ``True`` when the value is complete and convertible, ``False`` otherwise
    (``kwarg``: the value is a keyword argument's, see ``py_string``)."""
    if depth > MAX_DEPTH:
        return False
    first = yield from cur.peek()
    if first in ("'", '"'):
        return (yield from py_string(cur, write, kwarg=kwarg))
    if first == "[":
        cur.pos += 1
        return (yield from _sequence(cur, write, "]", depth))
    if first == "(":
        cur.pos += 1
        return (yield from _tuple(cur, write, depth))
    if first == "{":
        cur.pos += 1
        return (yield from _braces(cur, write, depth))
    text = yield from read_run(cur)
    if text is None:
        return False
    if text.lower() in _STRING_PREFIXES and (yield from cur.peek()) in ("'", '"'):
        return (yield from py_string(cur, write, raw="r" in text.lower(), kwarg=kwarg))
    converted = scalar_json(text)
    if converted is None:
        return False
    write(converted)
    return True


def _element(cur: Cursor, write: Write, depth: int) -> Generator[None, None, bool]:
    yield from cur.skip_ws()
    return (yield from py_value(cur, write, depth + 1))


def _sequence(cur: Cursor, write: Write, close: str, depth: int, opened: bool = False) -> Generator[None, None, bool]:
    """Elements up to ``close`` (the opener consumed) as a JSON array. With ``opened`` the ``[``
    and first element were already written and a separator is next."""
    if not opened:
        write("[")
        yield from cur.skip_ws()
        if (yield from cur.expect(close)):
            write("]")
            return True
        if not (yield from _element(cur, write, depth)):
            return False
    sep = yield from cur.list_separator(close)
    if sep is None:
        return False
    if sep == close:
        write("]")
        return True
    write(", ")
    return (yield from separated(cur, write, close, lambda: _element(cur, write, depth), "]"))


def _tuple(cur: Cursor, write: Write, depth: int) -> Generator[None, None, bool]:
    """``(a, b)`` → array; ``(a)`` is just ``a``; ``()`` → ``[]``."""
    yield from cur.skip_ws()
    if (yield from cur.expect(")")):
        write("[]")
        return True
    first: list[str] = []
    if not (yield from _element(cur, first.append, depth)):
        return False
    yield from cur.skip_ws()
    if (yield from cur.expect(")")):
        write("".join(first))
        return True
    write("[" + "".join(first))
    return (yield from _sequence(cur, write, ")", depth, opened=True))


def _key(value_json: str) -> str | None:
    """A dict key's JSON value as a JSON object key (``1`` → ``"1"``, like ``json.dumps``)."""
    if value_json.startswith('"'):
        return value_json
    if value_json[:1] in "[{":
        return None
    return json.dumps(value_json)


def _braces(cur: Cursor, write: Write, depth: int) -> Generator[None, None, bool]:
    """``{k: v, …}`` → object, ``{a, b}`` (a set) → array. The first element is held until the
    character after it tells which."""
    yield from cur.skip_ws()
    if (yield from cur.expect("}")):
        write("{}")
        return True
    first: list[str] = []
    if not (yield from _element(cur, first.append, depth)):
        return False
    yield from cur.skip_ws()
    if not (yield from cur.expect(":")):
        write("[" + "".join(first))
        return (yield from _sequence(cur, write, "}", depth, opened=True))
    key = _key("".join(first))
    if key is None:
        return False
    write("{")
    pending: list[str] = [key]

    def member() -> Generator[None, None, bool]:
        if pending:
            member_key = pending.pop()
        else:
            parts: list[str] = []
            if not (yield from _element(cur, parts.append, depth)):
                return False
            yield from cur.skip_ws()
            if not (yield from cur.expect(":")):
                return False
            found = _key("".join(parts))
            if found is None:
                return False
            member_key = found
        write(member_key + ": ")
        return (yield from _element(cur, write, depth))

    return (yield from separated(cur, write, "}", member, "}"))


# ---------------------------------------------------------------------------------- calls


def _head_prefix_end(buf: str, pos: int) -> int:
    """Where the longest prefix of a call head at ``pos`` ends (every part is optional: it always matches)."""
    found = _HEAD_PREFIX.match(buf, pos)
    return found.end() if found is not None else pos


def call_head(cur: Cursor, limit: int = 256) -> Generator[None, None, bool]:
    """Whether a call starts at the cursor: optional whitespace, ``NAME`` ``(`` and then ``)`` or
    ``KEY =``. Consumes nothing; waits only while the text so far could still become one."""
    while True:
        buf, pos = cur.buf, cur.pos
        if _HEAD.match(buf, pos) is not None:
            return True
        if cur.eof or len(buf) - pos > limit:
            return False
        if _head_prefix_end(buf, pos) < len(buf):
            return False
        yield


def python_call(cur: Cursor, out: Out, follow: Follow = IN_LIST) -> Generator[None, None, bool]:
    """Parse one call ``NAME(KEY=VALUE, …)`` at the cursor (after optional whitespace). The call
    must have been begun (``out.calls.begin``); this sends its header once ``NAME(`` is confirmed
    and streams its arguments. Returns ``True`` when the call closed with ``)``. ``follow``: what
    may come after it (``IN_LIST``, ``IN_LINES``)."""
    if not (yield from call_head(cur)):
        if cur.eof and _head_prefix_end(cur.buf, cur.pos) == len(cur.buf):
            cur.pos = len(cur.buf)  # cut off inside the head: an unfinished call
        return False
    head = _HEAD.match(cur.buf, cur.pos)
    assert head is not None
    cur.pos = head.end("open")
    out.calls.header(head.group("name"))
    args = ArgsObject(out.calls)
    while True:
        yield from cur.skip_ws()
        if (yield from cur.expect(")")):
            args.close()
            return True
        key = yield from read_run(cur, _IDENT, 256)
        if key is None:
            return False
        yield from cur.skip_ws()
        if not (yield from cur.expect("=")):
            return False
        yield from cur.skip_ws()
        args.key(key)
        if not (yield from py_value(cur, args.raw, kwarg=follow)):
            return False
        sep = yield from cur.list_separator(")")
        if sep is None:
            return False
        if sep == ")":
            args.close()
            return True


def python_call_list(cur: Cursor, out: Out, close: str = "]") -> Generator[None, None, bool]:
    """``call, call, … ]`` after the list's ``[`` (consumed). The caller has begun the first call
    (so the list's opening markup is recorded with it). A call ends once the separator after it
    (``,`` or ``close``) is seen — so ``[f(a=1) for a in xs]`` in prose is not a call — and the
    next one is begun at its separator, so a list cut off later keeps the calls it completed. An
    empty list is markup, not a call. Returns ``True`` if the list closed properly."""
    yield from cur.skip_ws()
    if (yield from cur.expect(close)):
        out.calls.cancel()
        return True
    while True:
        ok = yield from python_call(cur, out)
        sep = None
        if ok:
            yield from cur.skip_ws()
            sep = yield from cur.match((",", close))
        if sep == "," and (yield from peek_past_ws(cur))[0] == close:  # a trailing comma closes the list
            out.calls.end(True)
            yield from cur.skip_ws()
            return (yield from cur.expect(close))
        if sep != ",":
            out.calls.end(sep is not None)
            return sep is not None
        out.calls.end(True)
        out.calls.begin(sep)


def python_call_lines(cur: Cursor, out: Out, end: str) -> Generator[None, None, bool]:
    """Calls separated by whitespace (newlines), ``,`` or ``;``, up to and including ``end``
    (Olmo 3's ``<function_calls>`` body). The caller has begun the first call. A call ends once
    what follows it is ``end``, a separator, another call or the end of the output. Returns
    ``True`` when ``end`` closed the run (or the output ended there without being cut off)."""
    while True:
        if not (yield from python_call(cur, out, IN_LINES)):
            out.calls.end(False)
            return False
        lead: list[str] = []
        yield from cur.skip_ws(lead.append)
        sep = yield from cur.match((end, ",", ";"))
        if sep == end:
            out.calls.end(True)
            return True
        if sep is None and cur.eof and cur.available == 0:
            out.calls.end(True)
            return not cur.truncated
        if sep is None and not (yield from call_head(cur)):
            out.calls.end(False)
            return False
        out.calls.end(True)
        if sep is not None:
            lead.append(sep)
            yield from cur.skip_ws(lead.append)
        out.calls.begin("".join(lead))
        if (yield from cur.expect(end)):
            out.calls.cancel()
            return True


def peek_past_ws(cur: Cursor, offset: int = 0, limit: int = 256) -> Generator[None, None, tuple[str, int]]:
    """The first non-whitespace character at or after ``cur.pos + offset`` and its offset from
    ``cur.pos``, without consuming anything (``("", -1)`` at end of stream or past ``limit``
    characters of whitespace). The offset is valid until the next ``yield``."""
    while True:
        buf, start = cur.buf, cur.pos + offset
        found = _NON_WS.search(buf, start, start + limit)
        if found is not None:
            return found.group(), found.start() - cur.pos
        if cur.eof or len(buf) - start >= limit:
            return "", -1
        yield


def python_list_wire(opening: str = "[", closing: str = "]") -> WireFormat:
    """How a pythonic format writes calls: ``[f(a=1), g()]`` between ``opening`` and ``closing``.
    A bare list has no distinctive first word (no lazy-grammar trigger); a wrapped one starts with
    its wrapper."""
    return WireFormat("$name($args)", section=(lit(opening), lit(closing)), separator=", ", args=PYTHON_KWARGS,
                      trigger_word="" if opening == "[" else None)
