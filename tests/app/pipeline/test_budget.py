"""``app.pipeline.budget``'s pure parts: the cap under each policy, the no-round-trip bound.
(Fitting to a backend's context is tested over HTTP in ``tests/test_max_tokens.py``.)"""

from __future__ import annotations

import pytest

from app.errors import APIError
from app.pipeline.budget import MARGIN, Clamp, cap_max_tokens, obviously_fits
from app.settings import Settings


def test_without_a_cap_nothing_changes() -> None:
    assert cap_max_tokens(32000, Settings()) == (32000, None)
    assert cap_max_tokens(None, Settings()) == (None, None)


@pytest.mark.parametrize("policy", ["clamp", "reject"])
def test_the_cap_bounds_unbounded_requests_and_leaves_smaller_ones(policy: str) -> None:
    settings = Settings(max_tokens_cap=100, max_tokens_policy=policy)
    assert cap_max_tokens(None, settings) == (100, None)
    assert cap_max_tokens(0, settings) == (100, None)
    assert cap_max_tokens(100, settings) == (100, None)
    assert cap_max_tokens(7, settings) == (7, None)


def test_a_larger_request_is_lowered_or_refused_by_the_policy() -> None:
    granted, clamp = cap_max_tokens(1000, Settings(max_tokens_cap=100))
    assert granted == 100 and clamp == Clamp(1000, 100, "--max-tokens-cap 100")
    assert clamp.describe() == "clamped from 1000 to 100 (--max-tokens-cap 100)"
    with pytest.raises(APIError, match="cap of 100") as caught:
        cap_max_tokens(1000, Settings(max_tokens_cap=100, max_tokens_policy="reject"))
    assert caught.value.status == 400 and caught.value.param == "max_tokens"


def test_the_policy_setting_knows_two_values() -> None:
    assert Settings().max_tokens_policy == "clamp"
    with pytest.raises(ValueError):
        Settings(max_tokens_policy="truncate")


def test_a_prompt_fits_obviously_when_its_bytes_and_the_margin_leave_room() -> None:
    room = 1000 - MARGIN - 100
    assert obviously_fits("a" * room, 100, 1000)
    assert not obviously_fits("a" * (room + 1), 100, 1000)
    assert obviously_fits("é" * (room // 2), 100, 1000)  # two bytes a character: counted in bytes
    assert not obviously_fits("é" * (room // 2 + 1), 100, 1000)
    assert not obviously_fits("😀" * (room // 4 + 1), 100, 1000)
    assert not obviously_fits("", 1000, 1000)  # the margin alone does not fit
