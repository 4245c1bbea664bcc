"""``parsers.core.args``: arguments objects written as JSON from non-JSON text, values typed by schema."""

from __future__ import annotations

import json
from collections.abc import Callable, Generator
from typing import Any

import pytest

from parsers.core.args import ArgsObject, StringValue, convert_value, escape, param_kind
from parsers.core.cursor import Cursor
from parsers.core.driver import Out


def test_param_kind_reads_the_schema() -> None:
    assert param_kind(None) == ("string", False)
    assert param_kind({"type": "integer"}) == ("integer", False)
    assert param_kind({"type": ["integer", "null"]}) == ("integer", True)
    assert param_kind({"type": ["string", "integer"]}) == ("string", False)  # a string may be anything
    assert param_kind({"anyOf": [{"type": "number"}, {"type": "null"}]}) == ("number", True)
    assert param_kind({"enum": [1, 2]}) == ("integer", False)
    assert param_kind({"enum": ["a", None]}) == ("string", True)
    assert param_kind({"properties": {}}) == ("object", False)


@pytest.mark.parametrize(("text", "kind", "json_text"), [
    (" 42 ", "integer", "42"),
    ("2.0", "number", "2.0"),
    ("3", "number", "3"),
    ("1e3", "number", "1000.0"),
    ("True", "boolean", "true"),
    ("None", "integer", "null"),
    ('{"a": [1]}', "object", '{"a": [1]}'),
    ("{'a': True}", "object", '{"a": true}'),  # Python literals, as Jinja's ``string`` filter writes them
    ("not a number", "integer", '"not a number"'),  # never dropped: kept as a string
])
def test_convert_value(text: str, kind: str, json_text: str) -> None:
    assert convert_value(text, kind) == json_text


def test_escape_is_json_string_text() -> None:
    assert escape('a"b\\c\n\u0001é') == 'a\\"b\\\\c\\n\\u0001é'


def _args(run: Callable[[ArgsObject], Generator[None, None, Any]]) -> str:
    cur = Cursor()
    out = Out(cur)
    out.calls.begin()
    out.calls.header("f")
    args = ArgsObject(out.calls)
    gen = run(args)
    try:
        while True:
            next(gen)
    except StopIteration:
        pass
    args.close()
    return "".join(e.text for e in out.take() if hasattr(e, "text"))


def _value(chunks: list[str]) -> Callable[[Callable[[str], None]], Generator[None, None, bool]]:
    def read(write: Callable[[str], None]) -> Generator[None, None, bool]:
        for chunk in chunks:
            write(chunk)
        return True
        yield  # a generator

    return read


def test_args_object_streams_strings_and_converts_the_rest() -> None:
    def run(args: ArgsObject) -> Generator[None, None, None]:
        args.key("s")
        yield from args.value("string", True, False, _value(["\nline 1\n", "line \"2\"\n"]))
        args.key("n")
        yield from args.value("integer", True, False, _value(["\n7", "\n"]))

    text = _args(run)
    assert json.loads(text) == {"s": 'line 1\nline "2"', "n": 7}
    assert _args(lambda args: iter(())) == "{}"


@pytest.mark.parametrize(("chunks", "nullable", "value"), [
    (["nu", "ll"], True, None),
    (["nu", "llx"], True, "nullx"),
    (["null"], False, "null"),
    ([], False, ""),
    (["\n", "text\n"], False, "text"),  # one newline trimmed at each end, across chunks
])
def test_string_value(chunks: list[str], nullable: bool, value: object) -> None:
    out: list[str] = []
    string = StringValue(out.append, trim_newline=True, nullable=nullable)
    for chunk in chunks:
        string.write(chunk)
    string.close()
    assert json.loads("".join(out)) == value


@pytest.mark.parametrize(("text", "nullable", "value"), [
    ("  a b \n", False, "a b"),
    ("\n\t x \u2028", False, "x"),  # all whitespace, as str.strip()
    (" \n ", False, ""),
    ("a  \n  b", False, "a  \n  b"),  # inner whitespace is kept, even when held across chunks
    ("  null ", True, None),
    ("", False, ""),
])
def test_string_value_strip_in_every_chunking(text: str, nullable: bool, value: object) -> None:
    splits = [[text], list(text),
              *[[text[:i], text[i:]] for i in range(len(text) + 1)]]
    for chunks in splits:
        out: list[str] = []
        string = StringValue(out.append, trim_newline=False, nullable=nullable, strip=True)
        for chunk in chunks:
            string.write(chunk)
        string.close()
        assert json.loads("".join(out)) == value, chunks


def test_args_object_strips_converted_values() -> None:
    def run(args: ArgsObject) -> Generator[None, None, None]:
        args.key("n")
        yield from args.value("integer", False, False, _value([" \n4", "2 \n"]), strip=True)
        args.key("s")
        yield from args.value("string", False, False, _value(["  x", " y  "]), strip=True)

    assert json.loads(_args(run)) == {"n": 42, "s": "x y"}
