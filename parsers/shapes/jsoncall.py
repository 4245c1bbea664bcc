"""Tool calls written as JSON objects: ``{"name": "f", "arguments": {...}}`` and its relatives.

``json_call`` walks one call object member by member. The name is read whole (it is short); the
arguments value is streamed to the call as the model wrote it, fragment by fragment — it is never
re-serialised or re-parsed per chunk. ``JsonCallShape`` declares which keys hold what, so the
formats differ only in data:

* ``name_keys`` / ``args_keys`` — ``("name",)`` / ``("arguments", "parameters")`` for most;
* ``nest_keys`` — a member whose object value holds the name and arguments itself (OpenAI-style
  ``{"type": "function", "function": {...}}``);
* ``id_keys`` — a member holding the call id (Cohere's ``tool_call_id``);
* ``name_is_key`` — the object is ``{"NAME": {args}}`` (Apertus).

Arguments written before the name are held until the name arrives (the first delta of a call
must carry its name). Arguments written as a JSON string holding a JSON object (double-encoded)
are decoded once complete; ``null`` arguments become ``{}``.

``tagged_json`` declares the commonest format of all: one call object between two markers.
"""

from __future__ import annotations

import json
from collections.abc import Generator
from dataclasses import dataclass

from parsers.core.cursor import Cursor, discard
from parsers.core.driver import Out, is_json_object
from parsers.core.markers import MarkerSet
from parsers.format import CallContext, ToolFormat
from parsers.shapes.sections import as_tuple, calls_format
from parsers.wire import WireFormat


@dataclass(frozen=True)
class JsonCallShape:
    name_keys: tuple[str, ...] = ("name",)
    args_keys: tuple[str, ...] = ("arguments", "parameters")
    nest_keys: tuple[str, ...] = ("function",)
    id_keys: tuple[str, ...] = ()
    name_is_key: bool = False

    def claims(self, key: str) -> bool:
        """Whether ``key`` can be the first key of a call object of this shape."""
        return self.name_is_key or key in self.name_keys or key in self.args_keys or key in self.nest_keys \
            or key in self.id_keys or key == "type"


DEFAULT_SHAPE = JsonCallShape()  # ``{"name": …, "arguments"|"parameters": …}``, optionally under ``function``


def call_template(shape: JsonCallShape) -> str:
    """How a call object of ``shape`` is written, as a wire template (``$name``, ``$args``): the
    first name key and the first arguments key, or ``{"NAME": {…}}``."""
    if shape.name_is_key:
        return '{"$name": $args}'
    name_key, args_key = (json.dumps(k, ensure_ascii=False).replace("$", "$$")
                          for k in (shape.name_keys[0], shape.args_keys[0]))
    return "{" + name_key + ': "$name", ' + args_key + ": $args}"


class _CallState:
    __slots__ = ("args_done", "call_id", "held_args", "name")

    def __init__(self) -> None:
        self.name: str | None = None
        self.call_id: str | None = None
        self.held_args: str | None = None
        self.args_done = False


def _args_value(cur: Cursor, out: Out, state: _CallState, stop: MarkerSet | None) -> Generator[None, None, bool]:
    """Read an arguments value: stream it if the header is out, else hold it."""
    first = yield from cur.peek()
    if first == '"':  # double-encoded: a JSON string whose text is the JSON object
        text = yield from cur.json_string(limit=1 << 30)
        if not isinstance(text, str) or not is_json_object(text):
            return False
        value = text
    elif first == "{":
        if state.name is not None:
            state.args_done = True
            return (yield from cur.json_value(out.calls.args, stop))
        parts: list[str] = []
        if not (yield from cur.json_value(parts.append, stop)):
            return False
        value = "".join(parts)
    else:  # null (or a scalar): no arguments
        parts = []
        if not (yield from cur.json_value(parts.append, stop)):
            return False
        if "".join(parts).strip() != "null":
            return False
        value = "{}"
    state.args_done = True
    if state.name is not None:
        out.calls.args(value)
    else:
        state.held_args = value
    return True


def _members(cur: Cursor, out: Out, shape: JsonCallShape, state: _CallState, stop: MarkerSet | None,  # noqa: C901 — a streaming JSON object reader: one branch per member kind (name, arguments, id, other)
             first_key_checked: bool) -> Generator[None, None, bool]:
    """Walk the members of an object whose ``{`` is consumed, up to and including its ``}``."""
    first = True
    while True:
        yield from cur.skip_ws()
        if first and (yield from cur.expect("}")):
            return True
        key = yield from cur.json_string(limit=512)
        if key is None:
            return False
        if first and not first_key_checked and not shape.claims(key):
            return False
        first = False
        yield from cur.skip_ws()
        if not (yield from cur.expect(":")):
            return False
        yield from cur.skip_ws()
        if shape.name_is_key and state.name is None:
            state.name = key
            out.calls.header(key, state.call_id)
            if not (yield from _args_value(cur, out, state, stop)):
                return False
        elif key in shape.name_keys and state.name is None:
            name = yield from cur.json_string()
            if not isinstance(name, str) or not name:
                return False
            state.name = name
            out.calls.header(name, state.call_id)
            if state.held_args is not None:
                out.calls.args(state.held_args)
                state.held_args = None
        elif key in shape.args_keys and not state.args_done:
            if not (yield from _args_value(cur, out, state, stop)):
                return False
        elif key in shape.nest_keys and (yield from cur.expect("{")):
            if not (yield from _members(cur, out, shape, state, stop, True)):
                return False
        elif key in shape.id_keys and state.call_id is None and state.name is None:
            value = yield from cur.json_string()
            if value is None:
                parts: list[str] = []
                if not (yield from cur.json_value(parts.append, stop)):
                    return False
                value = "".join(parts)
            state.call_id = str(value)
        elif not (yield from cur.json_value(discard, stop)):
            return False
        yield from cur.skip_ws()
        sep = yield from cur.match((",", "}"))
        if sep is None:
            return False
        if sep == "}":
            return True


def json_call(cur: Cursor, out: Out, shape: JsonCallShape, stop: MarkerSet | None = None,
              first_key_checked: bool = True) -> Generator[None, None, bool]:
    """Parse one call object at the cursor (after optional whitespace). The call must have been
    begun (``out.calls.begin``); this sends its header and arguments. Returns ``True`` when the
    object is complete and named. With ``first_key_checked=False`` an object whose first key
    cannot belong to a call is rejected right there (so plain JSON answers stay content)."""
    yield from cur.skip_ws()
    if not (yield from cur.expect("{")):
        return False
    state = _CallState()
    if not (yield from _members(cur, out, shape, state, stop, first_key_checked)):
        return False
    if state.name is None:
        return False
    if state.held_args is not None:
        out.calls.args(state.held_args)
    return True


def json_calls(cur: Cursor, out: Out, shape: JsonCallShape,
               stop: MarkerSet | None = None) -> Generator[None, None, bool]:
    """One call object or a ``[…]`` list of them at the cursor (after optional whitespace). The
    caller has begun the first call; every call is ended here. Returns whether all were well formed."""
    yield from cur.skip_ws()
    if (yield from cur.peek()) == "{":
        ok = yield from json_call(cur, out, shape, stop)
        out.calls.end(ok)
        return ok
    return (yield from json_call_list(cur, out, shape, stop))


def json_call_list(cur: Cursor, out: Out, shape: JsonCallShape,
                   stop: MarkerSet | None = None) -> Generator[None, None, bool]:
    """Parse ``[call, call, …]`` at the cursor (after optional whitespace), one call per element.
    The caller has begun the first call (so the list's opening markup is recorded with it)."""
    yield from cur.skip_ws()
    if not (yield from cur.expect("[")):
        out.calls.end(False)
        return False
    return (yield from json_call_elements(cur, out, shape, stop))


def json_call_elements(cur: Cursor, out: Out, shape: JsonCallShape, stop: MarkerSet | None = None,
                       first_key_checked: bool = True) -> Generator[None, None, bool]:
    """The elements of a call list whose ``[`` is consumed, up to and including ``]``.

    The caller has begun the first call; each call is ended here — complete once its separator
    arrived, so a list cut off later keeps it — and the next one begun with its separator. With
    ``first_key_checked=False`` a first element whose
    first key cannot belong to a call is rejected at once. Returns ``True`` if the list closed
    properly (an empty list cancels the begun call: it is markup only)."""
    yield from cur.skip_ws()
    if (yield from cur.expect("]")):
        out.calls.cancel()
        return True
    checked = first_key_checked
    while True:
        ok = yield from json_call(cur, out, shape, stop, first_key_checked=checked)
        sep = None
        if ok:
            yield from cur.skip_ws()
            sep = yield from cur.match((",", "]"), consume=False)
        if sep != ",":  # a complete call without "]" after it counts unless the list was cut off there
            out.calls.end(ok and not (sep is None and cur.eof and cur.truncated))
            return sep is not None and (yield from cur.expect(sep))
        out.calls.end(True)
        checked = True
        yield from cur.expect(sep)
        out.calls.begin(sep)


def json_args_object(cur: Cursor, out: Out, stop: MarkerSet | None = None) -> Generator[None, None, bool]:
    """Stream an arguments object (after optional whitespace) to the current call as written.
    Anything but ``{`` here fails without consuming it."""
    yield from cur.skip_ws()
    if (yield from cur.peek()) != "{":
        return False
    return (yield from cur.json_value(out.calls.args, stop))


def decode_json_string(text: str) -> str | None:
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, str) else None


def tagged_json(start: str | tuple[str, ...], end: str, shape: JsonCallShape = DEFAULT_SHAPE, *,
                separator: str = "\n", pad: str = "\n", trim_around_calls: bool = True,
                markup: tuple[str, ...] = ()) -> ToolFormat:
    """``START {"name": …, "arguments": {…}} END``, repeated; anything else is content (except
    ``markup``, dropped from it). A start or end marker outside any JSON string breaks the call;
    the end marker may be missing where the model itself ended the output. Written as the first
    start marker, ``pad``, the call object, ``pad``, the end marker; calls joined by ``separator``."""
    starts = as_tuple(start)
    stop = MarkerSet((*starts, end))

    def read_call(ctx: CallContext, cur: Cursor, out: Out, marker: str) -> Generator[None, None, bool]:
        if not (yield from json_call(cur, out, shape, stop)):
            return False
        return (yield from cur.closing(end))

    wire = WireFormat(starts[0] + pad + call_template(shape) + pad + end, separator=separator)
    return calls_format(starts, read_call, wire=wire, markers=(end,), markup=markup,
                        trim_around_calls=trim_around_calls)
