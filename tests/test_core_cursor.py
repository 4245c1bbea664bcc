"""``parsers.core.cursor.Cursor`` primitives: what each consumes, returns and holds back, whatever
the chunking; linear work; recording."""

from __future__ import annotations

from collections.abc import Generator

import pytest

from parsers.core.cursor import Cursor, separated
from parsers.core.markers import MarkerSet
from tests.core_drive import PENDING, collect, drive, splits

TAGS = MarkerSet(("<call>", "</call>"))


@pytest.mark.parametrize("chunks", splits("before <call> after"))
def test_until_writes_the_text_before_a_marker_and_consumes_the_marker(chunks: list[str]) -> None:
    parts, write = collect()
    driven = drive(lambda cur: cur.until(TAGS, write), chunks)
    assert driven.result == "<call>" and "".join(parts) == "before " and driven.rest == " after"


def test_until_releases_text_as_soon_as_it_cannot_be_a_marker() -> None:
    parts, write = collect()
    driven = drive(lambda cur: cur.until(TAGS, write), ["hello <ca", "ll"], eof=False)
    assert driven.result is PENDING
    assert "".join(parts) == "hello "  # "<call" is held: it may become "<call>"
    parts, write = collect()
    drive(lambda cur: cur.until(TAGS, write), ["a < b <c"], eof=False)
    assert "".join(parts) == "a < b "  # only the tail that can begin a marker is held


def test_until_at_end_of_stream_writes_everything() -> None:
    parts, write = collect()
    driven = drive(lambda cur: cur.until(TAGS, write), ["text <ca"])
    assert driven.result is None and "".join(parts) == "text <ca" and driven.rest == ""


@pytest.mark.parametrize("chunks", splits("get_weather<sep>{}"))
def test_read_until_collects_up_to_a_marker(chunks: list[str]) -> None:
    driven = drive(lambda cur: cur.read_until(MarkerSet(("<sep>",))), chunks)
    assert driven.result == ("get_weather", "<sep>") and driven.rest == "{}"


def test_read_until_gives_up_past_its_limit_without_consuming() -> None:
    text = "x" * 50 + "<sep>"
    driven = drive(lambda cur: cur.read_until(MarkerSet(("<sep>",)), limit=10), [text])
    assert driven.result == (text, None) and driven.rest == text
    driven = drive(lambda cur: cur.read_until(MarkerSet(("<sep>",)), limit=10), list(text), eof=False)
    assert driven.result[1] is None and driven.rest.startswith("x" * 11)  # decided once the limit is passed


def test_read_until_resumes_where_it_stopped_searching() -> None:
    """Each resumption examines only the new text (plus a marker-length tail)."""
    scanned: list[int] = []
    markers = MarkerSet(("<sep>",))
    original = markers.find

    class Counting:
        longest = markers.longest

        @staticmethod
        def find(buf: str, start: int, eof: bool = False) -> tuple[int, str] | None:
            scanned.append(len(buf) - start)
            return original(buf, start, eof)

        safe_end = staticmethod(markers.safe_end)

    drive(lambda cur: cur.read_until(Counting, limit=100_000), ["y" * 100] * 50 + ["<sep>"])  # type: ignore[arg-type]
    assert max(scanned) <= 100 + markers.longest


def test_match_prefers_the_longest_literal_and_waits_while_undecided() -> None:
    assert drive(lambda cur: cur.match(("<a", "<ab")), ["<ab>"]).result == "<ab"
    assert drive(lambda cur: cur.match(("<a", "<ab")), ["<a"], eof=False).result is PENDING
    assert drive(lambda cur: cur.match(("<a", "<ab")), ["<a"]).result == "<a"
    missed = drive(lambda cur: cur.match(("x",)), ["yz"])
    assert missed.result is None and missed.rest == "yz"
    peeked = drive(lambda cur: cur.match(("<ab",), consume=False), ["<abc"])
    assert peeked.result == "<ab" and peeked.rest == "<abc"


def test_skip_ws_peek_expect_and_rest() -> None:
    parts, write = collect()
    driven = drive(lambda cur: cur.skip_ws(write), [" \n", "\t x"])
    assert driven.result is True and "".join(parts) == " \n\t " and driven.rest == "x"
    assert drive(lambda cur: cur.skip_ws(), ["   "]).result is False  # the stream ended
    assert drive(lambda cur: cur.peek(3), ["a", "bcd"]).result == "abc"
    assert drive(lambda cur: cur.peek(3), ["ab"]).result == "ab"
    assert drive(lambda cur: cur.expect("</x>"), ["</", "x>!"]).rest == "!"
    parts, write = collect()
    assert drive(lambda cur: cur.rest(write), ["a", "b"]).result is None and parts == ["a", "b"]


@pytest.mark.parametrize("chunks", splits('{"a": "x<stop>y", "b": [1]} tail'))
def test_json_value_streams_a_value_as_written(chunks: list[str]) -> None:
    parts, write = collect()
    driven = drive(lambda cur: cur.json_value(write, MarkerSet(("<stop>",))), chunks)
    assert driven.result is True and "".join(parts) == '{"a": "x<stop>y", "b": [1]}' and driven.rest == " tail"


def test_json_value_breaks_at_a_marker_outside_strings_and_leaves_it() -> None:
    parts, write = collect()
    driven = drive(lambda cur: cur.json_value(write, MarkerSet(("<stop>",))), ['{"a": 1 <stop> more'])
    assert driven.result is False and driven.rest == "<stop> more" and "".join(parts) == '{"a": 1 '
    parts, write = collect()  # a stop character that is not a marker is part of the value
    driven = drive(lambda cur: cur.json_value(write, MarkerSet(("<stop>",))), ['{"a": 1 < 2}'])
    assert driven.result is True and "".join(parts) == '{"a": 1 < 2}'


def test_json_string_decodes_or_consumes_nothing() -> None:
    assert drive(lambda cur: cur.json_string(), ['"caf\\u00e9 \\"q\\""', " rest"]).result == 'café "q"'
    missed = drive(lambda cur: cur.json_string(), ["name"])
    assert missed.result is None and missed.rest == "name"
    for chunks in splits('"far too long"'):  # too long however it arrives (it used to depend on the split)
        long = drive(lambda cur: cur.json_string(limit=5), chunks)
        assert long.result is None and long.rest == '"far too long"', chunks
    assert drive(lambda cur: cur.json_string(limit=7), ['"exact"']).result == "exact"


def test_closing_accepts_a_missing_closer_only_where_the_model_stopped() -> None:
    assert drive(lambda cur: cur.closing("</x>"), [" \n</x>"]).result is True
    assert drive(lambda cur: cur.closing("</x>"), [" "]).result is True  # stop string swallowed by the engine
    assert drive(lambda cur: cur.closing("</x>"), [" "], truncated=True).result is False  # cut at the limit
    assert drive(lambda cur: cur.closing("</x>"), [" more"]).result is False


def test_list_separator() -> None:
    assert drive(lambda cur: cur.list_separator("]"), [" , x"]).result == ","
    assert drive(lambda cur: cur.list_separator("]"), [" ]"]).result == "]"
    assert drive(lambda cur: cur.list_separator("]"), [", ]"]).result == "]"  # a trailing comma
    assert drive(lambda cur: cur.list_separator("]"), ["; "]).result is None


def test_separated_writes_elements_between_separators() -> None:
    parts, write = collect()

    def elements(cur: Cursor) -> Generator[None, None, bool]:
        def element() -> Generator[None, None, bool]:
            word = yield from cur.read_until(MarkerSet((",", ")")), limit=10)
            cur.unread(len(word[1] or ""))
            write(word[0].strip())
            return bool(word[0].strip())

        return (yield from separated(cur, write, ")", element, "]"))

    assert drive(elements, ["a, b ,c)"]).result is True and "".join(parts) == "a, b, c]"


def test_feed_drops_consumed_text_and_recording_spans_feeds() -> None:
    cur = Cursor()
    cur.feed("abc")
    cur.record("<open>")
    cur.pos = 2
    cur.feed("def")
    assert cur.buf == "cdef" and cur.pos == 0  # consumed text is gone
    cur.pos = 3
    assert cur.recorded() == "<open>abcde"
    assert cur.recorded() == ""  # recording stopped
    cur.unread(2)
    assert cur.buf[cur.pos:] == "def"


def test_tap_keeps_consumed_text_across_feeds_independently_of_recording() -> None:
    cur = Cursor()
    cur.feed("xxabc")
    cur.pos = 2
    cur.tap()
    cur.record()
    cur.pos = 3
    assert cur.recorded() == "a"
    cur.feed("def")
    cur.record()
    cur.pos += 3
    cur.feed("g")
    cur.pos += 1
    assert cur.recorded() == "bcde"
    assert cur.tapped() == "abcde"
    assert cur.tapped() == ""  # keeping stopped
