"""``app.backends``' one table of backend kinds, and what is derived from it."""

from __future__ import annotations

import argparse

import pytest
from pydantic import ValidationError

from app.backends import BACKEND_TYPES
from app.cli import add_settings_flags
from app.settings import Settings


def test_the_table_names_each_dialect_by_its_kind_and_ends_with_the_fallback() -> None:
    assert all(name == dialect.kind for name, dialect in BACKEND_TYPES.items())
    sniffless = [name for name, dialect in BACKEND_TYPES.items() if dialect.sniff is None]
    assert sniffless == [list(BACKEND_TYPES)[-1]] == ["openai"]


def test_settings_and_the_cli_accept_exactly_the_tables_names() -> None:
    for name in BACKEND_TYPES:
        assert Settings(backend_type=name).backend_type == name
    with pytest.raises(ValidationError, match="unknown backend type 'tgi'"):
        Settings(backend_type="tgi")
    parser = argparse.ArgumentParser()
    add_settings_flags(parser)
    (action,) = [a for a in parser._actions if a.dest == "backend_type"]
    assert action.choices == list(BACKEND_TYPES)
    assert all(name in (action.help or "") for name in BACKEND_TYPES)
