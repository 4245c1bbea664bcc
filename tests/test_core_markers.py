"""``parsers.core.markers.MarkerSet``: finding markers, and how much text may be released."""

from __future__ import annotations

import pytest

from parsers.core.markers import MarkerSet


def test_find_is_leftmost_then_longest() -> None:
    markers = MarkerSet(("<a>", "<ab>", "x"))
    assert markers.find("..x..<a>", 0) == (2, "x")
    assert markers.find("..<ab>..x", 0) == (2, "<ab>")
    assert markers.find("..<ab>..x", 3) == (8, "x")
    assert markers.find("nothing here", 0) is None


def test_a_marker_that_may_still_grow_into_a_longer_one_waits() -> None:
    markers = MarkerSet(("<tool>", "<tool_call>"))
    assert markers.find("text <tool", 0) is None  # not even "<tool>" yet
    assert markers.find("text <tool>", 0) == (5, "<tool>")
    short = MarkerSet(("[", "[TOOL]"))
    assert short.find("a [TO", 0) is None  # "[" might be the start of "[TOOL]"
    assert short.find("a [TO", 0, eof=True) == (2, "[")  # at the end of the stream it is just "["
    assert short.find("a [TX", 0) == (2, "[")  # ruled out


def test_safe_end_holds_back_only_a_tail_that_can_begin_a_marker() -> None:
    markers = MarkerSet(("<tool_call>",))
    assert markers.safe_end("hello", 0) == 5
    assert markers.safe_end("hello <tool_c", 0) == 6
    assert markers.safe_end("hello <", 0) == 6
    assert markers.safe_end("hello <b", 0) == 8  # "<b" cannot begin the marker
    assert markers.safe_end("a < b", 0) == 5
    assert markers.safe_end("x<tool_call", 1) == 1  # the whole rest may still become the marker
    assert markers.safe_end("<tool_call", 3) == 10  # from 3 on, nothing can begin it


def test_safe_end_looks_only_at_the_tail() -> None:
    """Holdback is bounded by the longest marker, whatever the buffer holds before it."""
    markers = MarkerSet(("<|end|>",))
    text = "<" * 10_000 + "<|en"
    assert markers.safe_end(text, 0) == 10_000
    assert markers.longest == len("<|end|>")


def test_starts_at_answers_marker_none_or_undecided() -> None:
    markers = MarkerSet(("</a>", "</ab>"))
    assert markers.starts_at("x</a>y", 1) == "</a>"
    assert markers.starts_at("x</ab>", 1) == "</ab>"
    assert markers.starts_at("x<b", 1) is None
    assert markers.starts_at("xy", 0) is None
    assert markers.starts_at("x</a", 1) is True  # may still become "</a>"
    assert markers.starts_at("x</a", 1, eof=True) is None


def test_sets_are_cached_and_combined() -> None:
    assert MarkerSet(("b", "a")) is MarkerSet(("a", "b", "a"))
    both = MarkerSet(("a",)) | ("b",)
    assert set(both.markers) == {"a", "b"} and "b" in both and "c" not in both
    assert both.first_chars == "ab"
    assert MarkerSet(("<x>",)).could_start("<x") and not MarkerSet(("<x>",)).could_start("<x>")
    with pytest.raises(ValueError, match="at least one"):
        MarkerSet(("",))


def test_first_char_at_finds_candidate_positions() -> None:
    markers = MarkerSet(("<|a|>", "[X]"))
    found = markers.first_char_at("abc [ <", 0)
    assert found is not None and found.start() == 4
    assert markers.first_char_at("plain text", 0) is None
