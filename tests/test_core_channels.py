"""``parsers.core.channels.TextChannel``: whitespace next to a marker boundary, decided by the text
alone (never by where it was split)."""

from __future__ import annotations

import pytest

from parsers.core.channels import TextChannel
from tests.core_drive import splits

BOUNDARY = "|"  # in the scripts below: a marker sits here


def run(script: str, chunked: list[str] | None = None, **options: bool) -> str:
    """Write ``script`` (``|`` = a boundary) to a channel; the emitted text."""
    out: list[str] = []
    channel = TextChannel(out.append, **options)
    for piece in chunked if chunked is not None else [script]:
        for i, part in enumerate(piece.split(BOUNDARY)):
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
