"""``parsers.core.driver``: the call writer's rules (numbering, checks, pass-through of failed calls)
and the driver's (resumption, end of stream, containment of a failing program)."""

from __future__ import annotations

from collections.abc import Generator

from parsers.core.cursor import Cursor
from parsers.core.driver import Driver, Out, Program
from parsers.core.markers import MarkerSet
from parsers.events import CallArgs, CallEnd, CallStart, Content, Event

OPEN, CLOSE = "<c>", "</c>"
TAGS = MarkerSet((OPEN,))
ENDS = MarkerSet((CLOSE,))


def calls_program(cur: Cursor, out: Out) -> Generator[None, None, None]:
    """A toy format: ``<c>NAME ARGS</c>``; a call without ``</c>`` fails."""
    while True:
        marker = yield from cur.until(TAGS, out.content.write)
        if marker is None:
            return
        out.calls.begin(marker)
        name, term = yield from cur.read_until(MarkerSet((" ",)), limit=50)
        if term is None:
            out.calls.end(False)
            continue
        out.calls.header(name)
        args, term = yield from cur.read_until(ENDS, limit=1000)
        if term is None:
            out.calls.end(False)
            continue
        out.calls.args(args)
        out.calls.end(True)


def run(program: Program, chunks: list[str], truncated: bool = False, **options: object) -> tuple[list[Event], Driver]:
    driver = Driver(program, **options)  # type: ignore[arg-type]
    events: list[Event] = []
    for chunk in chunks:
        events += driver.feed(chunk)
    events += driver.finish(truncated)
    return events, driver


def test_calls_are_numbered_and_their_fragments_merged() -> None:
    events, _ = run(calls_program, ["a", "<c>f ", '{"x"', ": 1}</c> b <c>g {}</c>"])
    assert events == [Content("a"), CallStart(0, "f"), CallArgs(0, '{"x": 1}'), CallEnd(0, True), Content(" b "),
                      CallStart(1, "g"), CallArgs(1, "{}"), CallEnd(1, True)]


def test_a_call_whose_arguments_are_not_an_object_is_passed_through() -> None:
    events, driver = run(calls_program, ["x <c>f [1]</c> y"], trim_around_calls=True)
    assert events == [Content("x"), CallStart(0, "f"), CallArgs(0, "[1]"), CallEnd(0, False, " <c>f [1]</c>"),
                      Content("y")]  # the whitespace trimmed before the call comes back with its text
    assert driver.out.calls.passed_through == 1


def test_empty_arguments_become_an_empty_object() -> None:
    def program(cur: Cursor, out: Out) -> Generator[None, None, None]:
        out.calls.begin()
        out.calls.header("f", "id-1")
        out.calls.end(True)
        yield from cur.rest(out.content.write)

    events, _ = run(program, ["rest"])
    assert events == [CallStart(0, "f", "id-1"), CallArgs(0, "{}"), CallEnd(0, True), Content("rest")]


def test_a_call_that_never_got_a_name_is_content_and_a_truncated_one_is_dropped() -> None:
    events, _ = run(calls_program, ["<c>" + "x" * 60])  # the name never ends: its text is content
    assert [e for e in events if isinstance(e, (CallStart, CallEnd))] == []
    assert "".join(e.text for e in events if isinstance(e, Content)) == "<c>" + "x" * 60
    events, _ = run(calls_program, ["ok <c>f {\"a\""], truncated=True)  # cut off inside the call
    assert events == [Content("ok "), CallStart(0, "f"), CallEnd(0, False, "")]  # an unfinished call: no text


def test_trim_around_calls_gives_trimmed_whitespace_back_when_a_call_fails() -> None:
    events, _ = run(calls_program, ["text \n<c>f {}</c>\n more"], trim_around_calls=True)
    assert [e for e in events if isinstance(e, Content)] == [Content("text"), Content("more")]
    events, _ = run(calls_program, ["text \n<c>f [</c>"], trim_around_calls=True)
    assert events[-1] == CallEnd(0, False, " \n<c>f [</c>")


def test_unknown_names_are_counted() -> None:
    _, driver = run(calls_program, ["<c>f {}</c><c>nope {}</c>"], known_names=frozenset({"f"}))
    assert driver.out.calls.unknown_names == 1


def test_cancel_forgets_markup_that_held_no_call() -> None:
    def program(cur: Cursor, out: Out) -> Generator[None, None, None]:
        marker = yield from cur.until(MarkerSet(("[]",)), out.content.write)
        assert marker == "[]"
        out.calls.begin(marker)
        out.calls.cancel()
        yield from cur.rest(out.content.write)

    events, _ = run(program, ["a[]b"])
    assert events == [Content("ab")]


def test_text_a_program_leaves_unread_is_content() -> None:
    def program(cur: Cursor, out: Out) -> Generator[None, None, None]:
        yield from cur.expect("head:")

    events, driver = run(program, ["head:", "tail"])
    assert events == [Content("tail")] and not driver.failed


def test_a_failing_program_is_contained() -> None:
    def program(cur: Cursor, out: Out) -> Generator[None, None, None]:
        out.calls.begin()
        out.calls.header("f")
        yield from cur.expect("x")
        raise RuntimeError("detector bug")

    events, driver = run(program, ["x", "after"])
    assert driver.failed
    assert events == [CallStart(0, "f"), CallEnd(0, False, "x"), Content("after")]


def test_the_driver_examines_each_chunk_once() -> None:
    """Linear time: a program waiting for a marker is resumed once per chunk and never rescans."""
    resumed = 0

    def program(cur: Cursor, out: Out) -> Generator[None, None, None]:
        nonlocal resumed
        while True:
            found = ENDS.find(cur.buf, cur.pos)
            if found is not None or cur.eof:
                return
            cur.pos = ENDS.safe_end(cur.buf, cur.pos)
            resumed += 1
            yield

    driver = Driver(program)
    for _ in range(100):
        driver.feed("x" * 10)
        assert len(driver.cursor.buf) - driver.cursor.pos < len(CLOSE)  # consumed text does not pile up
    driver.finish()
    assert resumed == 100
