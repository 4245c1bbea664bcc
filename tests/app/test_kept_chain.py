"""A ``previous_response_id`` continuation whose chain the prefix service kept: checked against the
store in one round trip while the store's last walk of it holds, walked again when it may not."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from app.api.responses.context import EXPIRY_MARGIN, ChainFacts, kept_chain
from app.conversation import Turn
from app.prefix import PrefixService, scope_of
from app.settings import Settings
from app.state import Chain, ChainLimits, StoredResponse
from app.state.sqlite import open_sqlite


class Counting:
    """A response store that counts the walks and the one-round-trip checks it answers."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.walks, self.checks = inner, 0, 0

    async def links(self, response_id: str, tenant: str, limits: ChainLimits) -> Chain:
        self.walks += 1
        chain: Chain = await self.inner.links(response_id, tenant, limits)
        return chain

    async def removals(self, response_id: str, tenant: str) -> int | None:
        self.checks += 1
        found: int | None = await self.inner.removals(response_id, tenant)
        return found


def record(key: str, previous: str | None) -> StoredResponse:
    return StoredResponse(key, "", {"id": key, "output": [{"type": "message", "text": key}]},
                          [{"type": "message", "role": "user", "content": key}], previous)


async def test_a_kept_chain_is_checked_in_one_round_trip_until_it_may_have_changed(tmp_path: Path) -> None:
    stores = open_sqlite(tmp_path / "k.sqlite3", 3600, 100, 1 << 30)
    try:
        ids = [f"resp_{i}" for i in range(6)]
        for i, key in enumerate(ids):
            await stores.responses.put(record(key, ids[i - 1] if i else None), "alice")
        store = Counting(stores.responses)
        prefix, settings, scope = PrefixService(1 << 20), Settings(), scope_of("alice", "responses")
        facts = ChainFacts(tuple(reversed(ids)), (2,) * 6, 0)
        prefix.keep_response("alice", ids[-1], scope, [Turn("user", "hi")], None, facts, 0, None)

        async def check() -> tuple[Any, ChainFacts] | None:
            found = await kept_chain(store, settings, prefix, ids[-1], "alice", scope)  # type: ignore[arg-type]
            if found is not None:  # what the next response's entry would carry
                prefix.keep_response("alice", ids[-1], scope, [Turn("user", "hi")], None, found[1], 0, None)
            return found

        first = await check()  # never walked: walked now
        assert first is not None and (store.walks, store.checks) == (1, 0)
        whole = await stores.responses.links(ids[-1], "alice", ChainLimits())
        assert first[1].removals == whole.removals and first[1].size == whole.size > 0
        second = await check()  # walked before, nothing removed since: one check, no walk
        assert second is not None and (store.walks, store.checks) == (1, 1)
        await stores.responses.put(record("other", None), "bob")
        await stores.responses.delete("other", "bob")  # another owner's removal changes nothing
        assert await check() is not None and (store.walks, store.checks) == (1, 2)
        await stores.responses.delete(ids[2], "alice")  # a link in the middle removed: walked, and broken
        assert await check() is None and (store.walks, store.checks) == (2, 3)
        assert prefix.recall_response("alice", ids[-1], scope) is None  # broken for good: forgotten
        assert await kept_chain(store, settings, prefix, ids[-1], "bob", scope_of("bob", "responses")) is None  # type: ignore[arg-type]
    finally:
        await stores.close()


@pytest.mark.parametrize("change", ["expiring", "limits"])
async def test_a_kept_chain_near_its_expiry_or_past_a_limit_is_walked(tmp_path: Path, change: str) -> None:
    stores = open_sqlite(tmp_path / "e.sqlite3", 3600, 100, 1 << 30)
    try:
        await stores.responses.put(record("resp_a", None), "alice")
        await stores.responses.put(record("resp_b", "resp_a"), "alice")
        store = Counting(stores.responses)
        walked = await stores.responses.links("resp_b", "alice", ChainLimits())
        assert walked.removals is not None
        expires = walked.expires if change == "limits" else walked.expires - 3600 + EXPIRY_MARGIN / 2
        facts = ChainFacts(("resp_b", "resp_a"), (2, 2), walked.size, walked.removals, expires)
        prefix, scope = PrefixService(1 << 20), scope_of("alice", "responses")
        prefix.keep_response("alice", "resp_b", scope, [Turn("user", "hi")], None, facts, 0, None)
        settings = Settings(max_chain_links=1) if change == "limits" else Settings()
        found = await kept_chain(store, settings, prefix, "resp_b", "alice", scope)  # type: ignore[arg-type]
        if change == "limits":  # one link allowed: not taken (the walk answers what is wrong)
            assert found is None and store.checks == 0
        else:  # the earliest expiry is near: walked, not trusted
            assert found is not None and (store.walks, store.checks) == (1, 0)
    finally:
        await stores.close()
