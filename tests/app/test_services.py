"""``app.services``: the concurrency slots and the lease that gives one back exactly once."""

from __future__ import annotations

import pytest

from app.errors import APIError
from app.metrics import Metrics
from app.services import Slots


async def test_a_lease_is_given_back_when_its_block_ends() -> None:
    slots = Slots(2)
    async with slots.lease():
        assert slots.used == 1
    assert slots.used == 0
    with pytest.raises(RuntimeError):
        async with slots.lease():
            raise RuntimeError("the request failed")
    assert slots.used == 0


async def test_a_handed_over_lease_is_given_back_by_its_new_owner_once() -> None:
    slots = Slots(1)
    async with slots.lease() as lease:
        release = lease.hand_over()
    assert slots.used == 1  # the stream owns it now
    release()
    release()  # a second call changes nothing
    assert slots.used == 0


async def test_past_the_limit_is_a_429_counted_in_the_metrics() -> None:
    metrics = Metrics()
    slots = Slots(1, metrics)
    async with slots.lease():
        with pytest.raises(APIError) as refused:
            slots.lease()
        assert refused.value.status == 429 and refused.value.headers["Retry-After"] == "1"
    assert metrics.rejected.labels("concurrency")._value.get() == 1
    async with slots.lease():
        assert slots.used == 1
    assert Slots(None).lease() is not None  # unbounded
