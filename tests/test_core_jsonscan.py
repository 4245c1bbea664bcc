"""``parsers.core.jsonscan.JsonValueScan``: where one JSON value ends, resumed chunk by chunk."""

from __future__ import annotations

import pytest

from parsers.core.jsonscan import JsonValueScan, Scan
from tests.core_drive import splits


def scan(chunks: list[str], stop_chars: str = "", eof: bool = True) -> tuple[str, Scan]:
    """Feed ``chunks`` into one buffer the way the cursor does (consumed text is dropped); the value
    text and the final state."""
    scanner = JsonValueScan(stop_chars)
    buf, pos, value = "", 0, []
    state = Scan.MORE
    for i, chunk in enumerate(chunks):
        buf = buf[pos:] + chunk
        pos = 0
        end, state = scanner.advance(buf, pos, eof and i == len(chunks) - 1)
        value.append(buf[pos:end])
        pos = end
        if state is not Scan.MORE:
            break
    return "".join(value), state


@pytest.mark.parametrize("text", [
    '{"a": 1}',
    '{"s": "}{][\\" \\\\", "n": [1, {"x": []}]}',
    '["a", "]", "\\\\"]',
    '"just a string with } and ]"',
    '{"deep": [[[[{"a": "b"}]]]]}',
])
def test_a_value_ends_where_it_ends_however_it_is_split(text: str) -> None:
    for chunks in splits(text + ' trailing }'):
        assert scan(chunks) == (text, Scan.DONE), chunks


def test_escapes_split_between_chunks_stay_escapes() -> None:
    assert scan(['"a\\', '"b"']) == ('"a\\"b"', Scan.DONE)
    assert scan(['{"a": "\\', '\\', '"}']) == ('{"a": "\\\\"}', Scan.DONE)


def test_an_unfinished_value_wants_more() -> None:
    assert scan(['{"a": [1, 2'], eof=False) == ('{"a": [1, 2', Scan.MORE)
    assert scan(['"open string'], eof=False)[1] is Scan.MORE


def test_scalars_end_at_the_first_character_that_cannot_continue_them() -> None:
    assert scan(["12.5e3, next"]) == ("12.5e3", Scan.DONE)
    assert scan(["true}"]) == ("true", Scan.DONE)
    assert scan(["-4"], eof=False) == ("-4", Scan.MORE)  # more digits may follow
    assert scan(["-4"], eof=True) == ("-4", Scan.DONE)


def test_stop_characters_outside_strings_stop_the_scan_before_them() -> None:
    assert scan(['{"a": "<x>", "b": 1 <x>'], stop_chars="<") == ('{"a": "<x>", "b": 1 ', Scan.STOPPED)
    assert scan(['{"a": "<x>"}'], stop_chars="<") == ('{"a": "<x>"}', Scan.DONE)
