"""The README documents every registered parser name and every alias."""

from __future__ import annotations

from pathlib import Path

from parsers.registry import REASONING_ALIASES, REASONING_PARSERS, TOOL_ALIASES, TOOL_PARSERS

README = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")


def test_every_parser_name_and_alias_is_documented() -> None:
    for name in [*TOOL_PARSERS, *TOOL_ALIASES, *REASONING_PARSERS, *REASONING_ALIASES]:
        assert f"`{name}`" in README, name


def test_the_two_setup_commands_come_first() -> None:
    head = README.split("## ", 2)[1]
    assert "make run" in head and "make test" in head
