"""The shapes constrained decoding produces when the backend is given a JSON schema instead of the
model's own wire format (vLLM ``structured_outputs.json``):

* ``JsonCallArray`` — ``tool_choice: "required"``: ``[{"name": "f", "arguments": {…}}, …]``;
* ``NamedArguments`` — a named ``tool_choice``: the output *is* the arguments object of that tool.

Both stream the arguments as written, like every other detector.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import Any

from parsers.core.cursor import Cursor
from parsers.core.jsoncall import JsonCallShape, json_args_object, json_call_list
from parsers.core.program import Out
from parsers.function_call import ToolCallDetector
from parsers.tools import ToolSpec


class JsonCallArray(ToolCallDetector):
    def body(self, cur: Cursor, out: Out) -> Generator[None, None, Any]:
        yield from cur.skip_ws()
        if (yield from cur.peek()) == "[":
            out.calls.begin()
            yield from json_call_list(cur, out, JsonCallShape())
        yield from cur.rest(out.content.write)


class NamedArguments(ToolCallDetector):
    def __init__(self, tools: Sequence[ToolSpec], name: str) -> None:
        super().__init__(tools)
        self.name = name

    def body(self, cur: Cursor, out: Out) -> Generator[None, None, Any]:
        yield from cur.skip_ws()
        if (yield from cur.peek()) == "{":
            out.calls.begin()
            out.calls.header(self.name)
            out.calls.end((yield from json_args_object(cur, out)))
        yield from cur.rest(out.content.write)
