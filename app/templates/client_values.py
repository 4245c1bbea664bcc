"""The client values of one render: every string a client sent that reaches the template.

``client_strings`` names each string with where it is (for a 400); ``texts`` lists those of turns in
one tight loop (for the scan); ``turn_strings`` / ``strings`` walk one turn / one JSON-like value,
mapping keys included; ``mapped`` / ``turn_with`` apply a function to every string and return the
same object wherever nothing changed. Call arguments are read as the template sees them: JSON text
with escapes is read decoded too. Pure functions of ``app.conversation`` values; nothing is cached.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable, Iterator, Mapping, Sequence
from functools import partial
from typing import Any

from app.conversation import Call, Turn


def _tool_name(tool: Mapping[str, Any]) -> str:
    function = tool.get("function")
    name = function.get("name") if isinstance(function, Mapping) else tool.get("name")
    return str(name)


def client_strings(turns: Sequence[Turn], tools: list[dict[str, Any]] | None, kwargs: Mapping[str, Any],
                   prefill: str, settled: Container[int] = ()) -> Iterator[tuple[Callable[[], str], str]]:
    """Every client string that reaches the template, with a function naming where it is (but those
    of the turns in ``settled``)."""
    for i, turn in enumerate(turns):
        if i in settled:
            continue
        for name, text in turn_strings(turn):
            yield partial("message {} ({}) {}".format, i, turn.role, name), text
    for i, tool in enumerate(tools or ()):
        for text in strings(tool):
            yield partial("tool {} ({!r}) definition".format, i, _tool_name(tool)), text
    for key, value in kwargs.items():
        for text in (key, *strings(value)):
            yield partial("chat_template_kwargs.{}".format, key), text
    if prefill:
        yield partial(str, "the final assistant message (continued)"), prefill


def unsettled(turns: Sequence[Turn], settled: Container[int]) -> Sequence[Turn]:
    """``turns`` but those in ``settled`` (by index)."""
    return [turn for i, turn in enumerate(turns) if i not in settled] if settled else turns


def texts(turns: Sequence[Turn], escapes: tuple[str, ...]) -> list[str]:
    """Every client string in ``turns`` (arguments JSON-decoded too where an escape in them could
    spell a control string's characters), in one tight loop."""
    out: list[str] = []
    add = out.append
    for turn in turns:
        if turn.text:
            add(turn.text)
        for part in turn.parts:  # a turn with images: its text pieces reach the template one by one
            if isinstance(part, str) and part:
                add(part)
        if turn.reasoning:
            add(turn.reasoning)
        if turn.name:
            add(turn.name)
        if turn.tool_call_id:
            add(turn.tool_call_id)
        for call in turn.calls:
            add(call.id)
            add(call.name)
            arguments = call.arguments
            if isinstance(arguments, str):
                add(arguments)
                if "\\" in arguments and any(e in arguments for e in escapes):
                    out.extend(strings(_decoded(arguments)))
            else:
                out.extend(strings(arguments))
        if turn.extra:
            out.extend(strings(turn.extra))
    return out


def turn_strings(turn: Turn) -> Iterator[tuple[str, str]]:
    """(field, text) of every client string a turn holds."""
    if turn.text:
        yield "content", turn.text
    for part in turn.parts:
        if isinstance(part, str) and part:
            yield "content", part
    if turn.name:
        yield "name", turn.name
    if turn.tool_call_id:
        yield "tool_call_id", turn.tool_call_id
    if turn.reasoning:
        yield "reasoning", turn.reasoning
    for k, call in enumerate(turn.calls):
        yield f"tool call {k} id", call.id
        yield f"tool call {k} name", call.name
        for text in _arguments_strings(call.arguments):
            yield f"tool call {k} arguments", text
    for key, value in turn.extra.items():
        for text in (key, *strings(value)):
            yield key, text


def _arguments_strings(arguments: str | Mapping[str, Any]) -> Iterable[str]:
    """Arguments as the template sees them: JSON text whose escapes (``\\u003c``) would be decoded
    by the render is read decoded too."""
    if not isinstance(arguments, str):
        return strings(arguments)
    if "\\" not in arguments:
        return (arguments,)
    return (arguments, *strings(_decoded(arguments)))


def _decoded(arguments: str) -> Any:
    import json

    try:
        return json.loads(arguments)
    except (ValueError, RecursionError):
        return None


def strings(value: Any) -> Iterator[str]:
    """Every string inside a JSON-like value, mapping keys included."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if item:
                yield item
        elif isinstance(item, Mapping):
            for k, v in item.items():
                if isinstance(k, str) and k:
                    yield k
                stack.append(v)
        elif isinstance(item, (list, tuple)):
            stack.extend(item)


def mapped(value: Any, fn: Callable[[str], str], key: Callable[[str], str]) -> Any:
    """``value`` with ``fn`` applied to every string in it (``key`` to mapping keys); containers are
    copied only where something changed."""
    if isinstance(value, str):
        return fn(value)
    if isinstance(value, Mapping):
        changed = False
        out: dict[Any, Any] = {}
        for k, v in value.items():
            nk = key(k) if isinstance(k, str) else k
            nv = mapped(v, fn, key)
            changed = changed or nk is not k or nv is not v
            out[nk] = nv
        if not changed:
            return value
        kind: Any = type(value)
        return kind(out) if kind is not dict and _rebuildable(value) else out
    if isinstance(value, (list, tuple)):
        items = [mapped(v, fn, key) for v in value]
        if all(a is b for a, b in zip(items, value, strict=True)):
            return value
        return type(value)(items) if type(value) in (list, tuple) else items
    return value


def _rebuildable(value: Any) -> bool:
    try:
        type(value)({})
    except Exception:  # noqa: BLE001 - a mapping type that cannot be built from a dict: a plain dict then
        return False
    return True


def turn_with(turn: Turn, fn: Callable[[str], str], key: Callable[[str], str]) -> Turn:
    text = fn(turn.text) if turn.text else turn.text
    name = fn(turn.name) if turn.name else turn.name
    call_id = fn(turn.tool_call_id) if turn.tool_call_id else turn.tool_call_id
    reasoning = fn(turn.reasoning) if turn.reasoning else turn.reasoning
    calls = tuple(_call_with(call, fn, key) for call in turn.calls)
    extra = mapped(turn.extra, fn, key)
    parts = tuple(fn(p) if isinstance(p, str) and p else p for p in turn.parts)
    if (text is turn.text and name is turn.name and call_id is turn.tool_call_id and reasoning is turn.reasoning
            and extra is turn.extra and all(a is b for a, b in zip(calls, turn.calls, strict=True))
            and all(a is b for a, b in zip(parts, turn.parts, strict=True))):
        return turn
    return Turn(turn.role, text, calls, reasoning, call_id, name, extra, parts)


def _call_with(call: Call, fn: Callable[[str], str], key: Callable[[str], str]) -> Call:
    call_id, name = fn(call.id), fn(call.name)
    arguments: str | Mapping[str, Any] = call.arguments
    if isinstance(arguments, str):
        if "\\" in arguments and _decoded(arguments) is not None and isinstance(_decoded(arguments), dict):
            decoded = _decoded(arguments)
            rewritten = mapped(decoded, fn, key)
            arguments = rewritten if rewritten is not decoded else arguments
        else:
            arguments = fn(arguments)
    else:
        arguments = mapped(arguments, fn, key)
    if call_id is call.id and name is call.name and arguments is call.arguments:
        return call
    return Call(call_id, name, arguments)
