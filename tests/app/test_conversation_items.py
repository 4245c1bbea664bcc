"""A stored conversation's items, as the Responses API reads them for a prompt: what the prefix
service kept of them, and from the store only what was added since (``conversation_items``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from app.api.responses.context import conversation_items
from app.errors import APIError
from app.prefix import PrefixService, scope_of
from app.state import ConversationLimits, ItemsMark, ItemsRead, StoredConversation, StoredItem
from app.state.sqlite import open_sqlite


class Counting:
    """A conversation store that counts the items its reads return."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.read = inner, 0

    async def read_items(self, conversation_id: str, tenant: str, since: ItemsMark | None = None) -> ItemsRead | None:
        got: ItemsRead | None = await self.inner.read_items(conversation_id, tenant, since)
        self.read += len(got.items) if got is not None else 0
        return got


def message(key: str, trusted: bool = False) -> StoredItem:
    return StoredItem({"type": "message", "id": key, "role": "assistant" if trusted else "user",
                       "content": [{"type": "input_text", "text": f"text of {key}"}]}, trusted)


def reasoning(key: str, trusted: bool = False) -> StoredItem:
    return StoredItem({"type": "reasoning", "id": key, "summary": [{"type": "summary_text", "text": key}]}, trusted)


@pytest.mark.parametrize("on", [True, False])
async def test_a_growing_conversation_is_read_from_where_it_was_left(tmp_path: Path, on: bool) -> None:
    stores = open_sqlite(tmp_path / "c.sqlite3", 3600, 100, 1 << 30)
    try:
        limits = ConversationLimits()
        await stores.conversations.create(StoredConversation("conv_g", 1), [message(f"m{i}") for i in range(20)],
                                          "alice", limits)
        store = Counting(stores.conversations)
        prefix = PrefixService(1 << 20 if on else 0)
        scope = scope_of("alice", "responses")
        first = await conversation_items(store, prefix, "conv_g", "alice", scope)  # type: ignore[arg-type]
        assert [i.id for i in first.items] == [f"m{i}" for i in range(20)] and store.read == 20
        await stores.conversations.add_items("conv_g", [message("m20"), message("m21", True), reasoning("rs_client"),
                                                         reasoning("rs_own", True)], "alice", limits)
        grown = await conversation_items(store, prefix, "conv_g", "alice", scope)  # type: ignore[arg-type]
        assert [i.id for i in grown.items] == [*(f"m{i}" for i in range(22)), "rs_client", "rs_own"]
        assert [i.trusted for i in grown.items] == [i in (21, 23) for i in range(24)]
        assert store.read == (24 if on else 44)  # on: only the four new ones were read
        whole = await conversation_items(store, PrefixService(1 << 20), "conv_g", "alice", scope)  # type: ignore[arg-type]
        assert len(whole.units) == 24  # read whole
        assert grown.units == (whole.units if on else [])  # read in two, the same units; off: none made at all
        # what a request derives of the items, derived as they came: the same as of the whole read
        assert grown.objects == whole.objects == [i.item for i in whole.items]
        assert grown.own == whole.own == {"m21": whole.items[21], "rs_own": whole.items[23]}
        assert grown.reasoning == whole.reasoning == [22]  # a client's reasoning item (its stored copy is looked up)
        # an item deleted in the middle: everything is read again, and the deleted one is gone
        await stores.conversations.delete_item("conv_g", "m3", "alice")
        store.read = 0
        after = await conversation_items(store, prefix, "conv_g", "alice", scope)  # type: ignore[arg-type]
        assert "m3" not in [i.id for i in after.items] and len(after.items) == 23 and store.read == 23
        assert after.reasoning == [21]
        # another tenant, with what alice's reads left kept: the conversation is not there
        with pytest.raises(APIError) as refused:
            await conversation_items(store, prefix, "conv_g", "bob", scope_of("bob", "responses"))  # type: ignore[arg-type]
        assert refused.value.status == 404
        # the conversation deleted: a 404, whatever was kept
        await stores.conversations.delete("conv_g", "alice")
        with pytest.raises(APIError):
            await conversation_items(store, prefix, "conv_g", "alice", scope)  # type: ignore[arg-type]
        # (deleted through another worker or replica: what this one kept goes when it learns so)
        assert prefix.recall_items("alice", "conv_g", scope) is None
    finally:
        await stores.close()
