"""The shapes constrained decoding produces when the backend is given a JSON schema instead of the
model's own wire format (vLLM ``structured_outputs.json``):

* ``JsonCallArray`` — ``tool_choice: "required"``: ``[{"name": "f", "arguments": {…}}, …]``;
* ``NamedArguments`` — a named ``tool_choice``: the output *is* the arguments object of that tool.

Both stream the arguments as written, like every other detector. ``ConstrainedOrOwn`` reads either
shape or, when the backend did not apply the constraint, the model's own format.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence

from parsers.declare import (
    DEFAULT_SHAPE,
    CallContext,
    Cursor,
    Out,
    ToolCallDetector,
    ToolFormat,
    ToolSpec,
    WireFormat,
    call_template,
    json_args_object,
    json_call_list,
)


def _json_array(ctx: CallContext, cur: Cursor, out: Out) -> Generator[None, None, None]:
    yield from cur.skip_ws()
    if (yield from cur.peek()) == "[":
        out.calls.begin()
        yield from json_call_list(cur, out, DEFAULT_SHAPE)
    yield from cur.rest(out.content.write)


class JsonCallArray(ToolCallDetector):
    format = ToolFormat(read=_json_array, start_markers=(), wire=WireFormat(
        call_template(DEFAULT_SHAPE), section=("[", "]"), separator=", ", trigger_word=""))


class NamedArguments(ToolCallDetector):
    """Reads the arguments of one tool named per request (no format of its own: ``body``)."""

    def __init__(self, tools: Sequence[ToolSpec], name: str) -> None:
        super().__init__(tools)
        self.name = name

    def body(self, cur: Cursor, out: Out) -> Generator[None, None, None]:
        yield from cur.skip_ws()
        if (yield from cur.peek()) == "{":
            out.calls.begin()
            out.calls.header(self.name)
            out.calls.end((yield from json_args_object(cur, out)))
        yield from cur.rest(out.content.write)


class ConstrainedOrOwn(ToolCallDetector):
    """``constrained`` when the text opens (after whitespace) with one of ``openers``, else the
    model's own format ``own`` (``fell_back`` is then set) — a backend may ignore a constraint."""

    def __init__(self, constrained: ToolCallDetector, own: ToolCallDetector | None, openers: str) -> None:
        super().__init__(constrained.tools)
        self.constrained = constrained
        self.own = own
        self.openers = openers
        self.fell_back = False

    def prepare(self, prompt: str | None) -> None:
        super().prepare(prompt)
        if self.own is not None:
            self.own.prepare(prompt)

    def body(self, cur: Cursor, out: Out) -> Generator[None, None, object]:
        yield from cur.skip_ws()
        first = yield from cur.peek()
        if not first or first in self.openers or self.own is None:
            yield from self.constrained.body(cur, out)
            return None
        self.fell_back = True
        return (yield from self.own.body(cur, out))
