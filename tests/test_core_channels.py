"""``parsers.core.channels.TextChannel``: whitespace next to a marker boundary, decided by the text
alone (never by where it was split)."""

from __future__ import annotations

from typing import Any

import pytest

from parsers.core.channels import TextChannel
from parsers.core.markers import MarkerSet
from tests.core_drive import splits

BOUNDARY = "|"  # in the scripts below: a marker sits here


def run(script: str, chunked: list[str] | None = None, boundary: str = BOUNDARY, **options: Any) -> str:
    """Write ``script`` (``|`` = a boundary) to a channel; the emitted text."""
    out: list[str] = []
    channel = TextChannel(out.append, **options)
    for piece in chunked if chunked is not None else [script]:
        for i, part in enumerate(piece.split(boundary)):
            if i:
                channel.boundary()
            channel.write(part)
    channel.close()
    return "".join(out)


def test_plain_channel_passes_everything() -> None:
    assert run("a \n|\n b ") == "a \n\n b "


def test_trim_before_drops_whitespace_right_before_a_boundary_only() -> None:
    assert run("Hello \n|call", trim_before_boundary=True) == "Hellocall"
    assert run("Hello \n world", trim_before_boundary=True) == "Hello \n world"  # inner whitespace is text
    assert run("end \n", trim_before_boundary=True) == "end \n"  # released at close


def test_trim_after_drops_whitespace_right_after_a_boundary() -> None:
    assert run("a|\n\n b |c", trim_after_boundary=True) == "ab c"


def test_strip_leading_and_strip_next_and_close_without_trailing() -> None:
    assert run("  \n text", strip_leading=True) == "text"
    out: list[str] = []
    channel = TextChannel(out.append, trim_before_boundary=True)
    channel.write("a")
    channel.strip_next()
    channel.write("  b  ")
    channel.close(keep_trailing=False)
    assert "".join(out) == "ab"


def test_boundary_returns_what_it_dropped_and_drop_held_discards() -> None:
    out: list[str] = []
    channel = TextChannel(out.append, trim_before_boundary=True)
    channel.write("text \n")
    assert channel.boundary() == " \n"
    channel.write("more  ")
    channel.drop_held()
    channel.close()
    assert "".join(out) == "textmore"


@pytest.mark.parametrize("options", [{}, {"trim_before_boundary": True}, {"trim_after_boundary": True},
                                     {"trim_before_boundary": True, "trim_after_boundary": True,
                                      "strip_leading": True}])
def test_any_split_gives_the_same_text(options: dict[str, bool]) -> None:
    script = "  lead \t\n| mid  \n\n  |\n|tail \n "
    whole = run(script, **options)
    for chunks in splits(script):
        assert run(script, chunks, **options) == whole, chunks


# ---------------------------------------------------------------------------------- envelope markup

ENVELOPE = MarkerSet(("<|START_RESPONSE|>", "<|END_RESPONSE|>", "<|open|>response<|sep|>"))


def test_envelope_markers_are_dropped_with_the_whitespace_next_to_them() -> None:
    assert run("\n<|START_RESPONSE|>\nThe answer.\n<|END_RESPONSE|>\n", boundary="¦", markup=ENVELOPE) == "The answer."
    assert run("a <|START_RESPONSE|> b", boundary="¦", markup=ENVELOPE) == "ab"
    assert run("Line one.\n\n- item <|open|>response<|sep|>x", boundary="¦", markup=ENVELOPE) == "Line one.\n\n- itemx"


def test_envelope_lookalikes_stay_text() -> None:
    assert run("a <| b <|START but <|START_RESPONSE and <|open|>resp", boundary="¦", markup=ENVELOPE) == \
        "a <| b <|START but <|START_RESPONSE and <|open|>resp"
    assert run("trailing ws is kept at close \n", boundary="¦", markup=ENVELOPE) == "trailing ws is kept at close \n"


def test_a_boundary_releases_a_held_envelope_prefix_as_text() -> None:
    assert run("x <|START_RESP¦y", boundary="¦", markup=ENVELOPE) == "x <|START_RESPy"


def test_envelope_markup_is_split_invariant() -> None:
    script = " <|START_RESPONSE|> mid <|END_RESP¦tail\n<|END_RESPONSE|> \n<|open|>response<|sep|>end "
    for options in ({}, {"trim_before_boundary": True, "trim_after_boundary": True}):
        whole = run(script, boundary="¦", markup=ENVELOPE, **options)
        for chunks in splits(script):
            assert run(script, chunks, boundary="¦", markup=ENVELOPE, **options) == whole, chunks
