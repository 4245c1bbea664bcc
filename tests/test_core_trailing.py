"""``parsers.core.trailing.TrailingTokens``: a run of end-of-turn tokens that closes the output is
dropped, the same text anywhere else is kept; decided by the text alone, in bounded work."""

from __future__ import annotations

import pytest

from parsers.core.driver import Driver, Out
from parsers.core.trailing import TrailingTokens
from parsers.events import Content
from tests.core_drive import splits

TOKENS = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|eom_id|>")


def run(chunks: list[str], tokens: tuple[str, ...] = TOKENS) -> str:
    trailing = TrailingTokens(tokens)
    return "".join(trailing.feed(c) for c in chunks) + trailing.finish()


@pytest.mark.parametrize(("text", "kept"), [
    ("Hello.<|im_end|>", "Hello."),
    ("Hello.\n<|im_end|>\n", "Hello.\n"),  # whitespace before the token is the text's; after it, the run's
    ("Hello.<|im_end|><|endoftext|>", "Hello."),  # a run of several
    ("Hello.<|eom_id|> \n<|eot_id|>\n\n", "Hello."),
    ("<|im_end|>", ""),
    ("a<|im_end|>b", "a<|im_end|>b"),  # not the last text: kept as written
    ("a<|im_end|>\n<|im_", "a<|im_end|>\n<|im_"),  # ends with part of a token: kept
    ("a <|im_end", "a <|im_end"),
    ("x <| y <", "x <| y <"),
    ("<|im_end|>x<|im_end|>", "<|im_end|>x"),
    ("", ""),
])
def test_only_a_closing_run_is_dropped(text: str, kept: str) -> None:
    assert run([text]) == kept
    for chunks in splits(text):
        assert run(chunks) == kept, chunks


def test_held_text_is_bounded_and_split_invariant() -> None:
    text = "<|im_end|>" * 40 + "tail" + "<|im_end|>" * 40
    trailing = TrailingTokens(TOKENS)
    released = "".join(trailing.feed(c) for c in text)
    assert len(text) - len(released) <= 64
    assert released + trailing.finish() == run([text])
    assert run([text]).endswith("tail" + "<|im_end|>" * 34)  # only the last run within the bound is dropped


def test_driver_drops_the_token_before_the_program_sees_it() -> None:
    seen: list[str] = []

    def program(cur, out: Out):  # type: ignore[no-untyped-def]
        yield from cur.rest(seen.append)
        out.content.write("".join(seen))

    driver = Driver(program, end_tokens=TOKENS)
    events = [*driver.feed("Hi<|im_"), *driver.feed("end|>\n"), *driver.finish()]
    assert "".join(seen) == "Hi"
    assert events == [Content("Hi")]
