"""``parsers.shapes.sections``: the outer loop of content, calls and sections, on a toy format whose
call is ``NAME=JSON`` after a start marker."""

from __future__ import annotations

from collections.abc import Generator, Mapping

import pytest

from parsers import fold
from parsers.core.cursor import Cursor
from parsers.core.driver import Driver, Out
from parsers.core.markers import MarkerSet
from parsers.format import CallContext
from parsers.shapes.jsoncall import json_args_object
from parsers.shapes.sections import calls_format, marker_calls, section_pairs
from parsers.tools import ToolSpec
from parsers.wire import WireFormat
from tests.core_drive import splits

CALL, BEGIN, END = "<c>", "<calls>", "</calls>"


class Ctx:
    tools_by_name: Mapping[str, ToolSpec] = {}
    prompt: str | None = None


def read_call(ctx: CallContext, cur: Cursor, out: Out, marker: str) -> Generator[None, None, bool]:
    name, term = yield from cur.read_until(MarkerSet(("=",)), limit=20)
    if term is None or not name:
        return False
    out.calls.header(name)
    return (yield from json_args_object(cur, out))


def parse(text: str, section: tuple[str, str] | None, bare: bool,
          markup: tuple[str, ...] = ()) -> tuple[str, list[tuple[str, str]]]:
    program = marker_calls(CALL, read_call, section, bare, markup)
    results = []
    for chunks in splits(text):
        driver = Driver(lambda cur, out: program(Ctx(), cur, out), trim_around_calls=True)
        events = [e for chunk in chunks for e in driver.feed(chunk)] + driver.finish()
        message = fold(events)
        results.append((message.content, [(c.name, c.arguments) for c in message.calls]))
    assert all(r == results[0] for r in results), text
    return results[0]


def test_calls_outside_a_section() -> None:
    # whitespace next to a call is markup here (trim_around_calls)
    assert parse('hi <c>f={"a": 1} bye', None, False) == ("hibye", [("f", '{"a": 1}')])


def test_text_between_calls_inside_a_section_is_markup() -> None:
    text = 'hi <calls> <c>f={} junk <c>g={"b": 2}\n</calls> bye'
    assert parse(text, (BEGIN, END), False) == ("hibye", [("f", "{}"), ("g", '{"b": 2}')])


def test_bare_calls_only_where_allowed() -> None:
    assert parse("x <c>f={}", (BEGIN, END), True) == ("x", [("f", "{}")])
    assert parse("x <c>f={}", (BEGIN, END), False) == ("x <c>f={}", [])


def test_bare_calls_read_as_the_section_whose_opener_was_left_out() -> None:
    # the stray end after them (or anywhere, with no opener before it) is markup
    assert parse("hi <c>f={}\n <c>g={}\n</calls> bye", (BEGIN, END), True) == ("hibye", [("f", "{}"), ("g", "{}")])
    assert parse("a </calls> b", (BEGIN, END), True) == ("ab", [])
    assert parse("a </calls> b", (BEGIN, END), False) == ("a </calls> b", [])
    assert parse("<c>f={} </callsX", (BEGIN, END), True) == ("</callsX", [("f", "{}")])


def test_after_a_malformed_call_the_rest_of_the_section_is_content() -> None:
    content, calls = parse("<calls><c>f=oops <c>g={}</calls>", (BEGIN, END), False)
    assert calls == [] and "oops" in content and "<c>g={}" in content


def test_a_section_without_calls_leaves_no_markup() -> None:
    assert parse("a <calls></calls> b", (BEGIN, END), False) == ("ab", [])


def test_markup_is_dropped_from_the_content_only() -> None:
    # the text around a dropped marker is kept as written; inside a call the marker is text
    assert parse("<m>a\n</m> b", None, False, ("<m>", "</m>")) == ("a\n b", [])
    text = '<m>a <c>f={"t": "<m>"}</m> b'
    assert parse(text, None, False, ("<m>", "</m>")) == ("ab", [("f", '{"t": "<m>"}')])
    fmt = calls_format(CALL, read_call, wire=WireFormat("<c>$name=$args"), markup=("<m>",))
    assert "<m>" in fmt.markers and fmt.start_markers == (CALL,)


def test_section_pairs() -> None:
    assert section_pairs(None) == ()
    assert section_pairs(("<a>", "</a>")) == (("<a>", "</a>"),)
    assert section_pairs((("<a>", "</a>"), ("<b>", "</b>"))) == (("<a>", "</a>"), ("<b>", "</b>"))


@pytest.mark.parametrize(("section", "bare", "starts"), [
    (None, False, (CALL,)),
    ((BEGIN, END), False, (BEGIN,)),
    ((BEGIN, END), True, (BEGIN, CALL)),
])
def test_calls_format_derives_its_markers(section: tuple[str, str] | None, bare: bool,
                                          starts: tuple[str, ...]) -> None:
    fmt = calls_format(CALL, read_call, wire=WireFormat("<c>$name=$args"), section=section, bare_calls=bare,
                       markers=("=",))
    assert fmt.start_markers == starts
    assert set(fmt.markers) == {CALL, "=", *(section or ())}
    assert fmt.has_tool_call("x " + starts[0]) and not fmt.has_tool_call("plain")
