"""The ids the Responses API gives input items that came without one (``normalised_input``)."""

from __future__ import annotations

import re
from typing import Any

from app.api.responses.decode import normal_item as _normal_item
from app.api.responses.decode import normalised_input


def test_items_without_an_id_get_distinct_random_ids_of_their_kind() -> None:
    raw = [{"type": "message", "role": "user", "content": "hi"},
           {"type": "function_call_output", "call_id": "c1", "output": "ok"},
           {"id": "fc_given", "type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
           {"role": "user", "content": "again"}] * 50
    first, second = normalised_input(raw), normalised_input(raw)
    ids = [item["id"] for item in first + second]
    assert ids.count("fc_given") == 100
    made = [i for i in ids if i != "fc_given"]
    assert len(set(made)) == len(made) == 300  # never repeated, within a request or across
    assert all(re.fullmatch(r"[a-z]+_[0-9a-f]{32}", i) for i in made)
    assert first[0]["id"].startswith("msg_") and first[3]["id"].startswith("msg_")
    assert first[1] == {"id": first[1]["id"], "type": "function_call_output", "call_id": "c1", "output": "ok"}
    assert raw[0] == {"type": "message", "role": "user", "content": "hi"}  # the client's items are left alone


def test_an_agents_next_input_checks_only_its_new_items(monkeypatch) -> None:
    """An item's normal form (a type the decoder reads, a stub for a hosted tool's call) is worked out
    once per item: an agent's next body (``app.bodies``) asks it of its new items alone — and the
    input comes out as it does without the body's elements, each item lacking an id given a new one."""
    import json

    from app.api.responses import decode
    from app.prefix import PrefixService, scope_of

    service, scope = PrefixService(64 << 20), scope_of("", "responses")
    asked: list[Any] = []
    monkeypatch.setattr(decode, "normal_item", lambda item, data=None: asked.append(item) or _normal_item(item, data))
    items: list[dict[str, Any]] = [{"type": "message", "role": "developer", "content": "Sandbox. " * 200}]
    for turn in range(4):
        items += [{"id": f"fc_{turn}", "type": "function_call", "call_id": f"c{turn}", "name": "f", "arguments": "{}"},
                  {"type": "function_call_output", "call_id": f"c{turn}", "output": "ok " * 50},
                  {"id": f"ws_{turn}", "type": "web_search_call", "status": "completed", "action": {"q": "x"}}]
        raw = json.dumps({"model": "m", "input": items}, separators=(",", ":")).encode()
        body, elements = service.read_body(scope, raw, "input")
        asked.clear()
        got = normalised_input(list(body["input"]), elements)
        if turn == 3:
            assert asked == items[-3:]  # the new ones only
        alone = normalised_input(body["input"])
        assert [{k: v for k, v in a.items() if k != "id"} for a in got] == \
               [{k: v for k, v in b.items() if k != "id"} for b in alone]
        assert [a["id"] for a in got if a["id"].startswith(("fc_", "ws_")) and len(a["id"]) < 8] == \
               [b["id"] for b in alone if b["id"].startswith(("fc_", "ws_")) and len(b["id"]) < 8]
        assert got[-1] == {"id": f"ws_{turn}", "type": "web_search_call", "status": "completed"}  # its stub


def test_without_a_store_items_keep_the_ids_they_came_with_and_problems_are_still_named() -> None:
    """With nothing storing the input (``store: false``, no conversation) no id is made for it: none
    would ever be seen. A malformed item is the same 400 either way."""
    import pytest

    from app.errors import APIError

    raw = [{"role": "user", "content": "hi"}, {"id": "fc_1", "type": "function_call", "call_id": "c1", "name": "f",
                                               "arguments": "{}"},
           {"type": "web_search_call", "status": "completed", "action": {"q": "x"}}]
    assert normalised_input(raw, ids=False) == [{"type": "message", "role": "user", "content": "hi"}, raw[1],
                                                {"type": "web_search_call", "status": "completed"}]
    minted = normalised_input(raw)
    assert [sorted(item) for item in minted] == [["content", "id", "role", "type"], sorted(raw[1]),
                                                 ["id", "status", "type"]]
    for ids in (True, False):
        for bad, param in (([*raw, 7], "input.3"), ([*raw, {"type": 3}], "input.3.type")):
            with pytest.raises(APIError) as refused:
                normalised_input(bad, ids=ids)
            assert refused.value.status == 400 and refused.value.param == param


async def test_what_the_context_looks_for_in_an_input_is_read_off_its_new_items_alone(monkeypatch) -> None:
    """Which input items are reasoning (their stored copies may be read) and which are
    ``item_reference``s (replaced by the items they name) is worked out once per item: an agent's
    next input asks it of its new items alone — and a reference among them is still resolved (here,
    to nothing: a 400 naming it)."""
    import json

    import pytest

    from app.api.responses import context as context_module
    from app.api.responses.parse import parse_request
    from app.errors import APIError
    from app.prefix import PrefixService, scope_of
    from app.settings import Settings

    service, scope, settings = PrefixService(64 << 20), scope_of("", "responses"), Settings()
    asked: list[Any] = []
    kind = context_module._kind
    monkeypatch.setattr(context_module, "_kind", lambda item, data=None: asked.append(item) or kind(item, data))
    items: list[dict[str, Any]] = [{"type": "message", "role": "developer", "content": "Sandbox. " * 200}]
    for turn in range(5):
        items += [{"type": "reasoning", "id": f"rs_{turn}", "summary": [{"type": "summary_text", "text": "t"}]},
                  {"id": f"fc_{turn}", "type": "function_call", "call_id": f"c{turn}", "name": "f", "arguments": "{}"},
                  {"type": "function_call_output", "call_id": f"c{turn}", "output": "ok " * 50}]
        if turn == 4:
            items.append({"type": "item_reference", "id": "msg_nowhere"})
        raw = json.dumps({"model": "m", "store": False, "input": items}, separators=(",", ":")).encode()
        body, elements = service.read_body(scope, raw, "input")
        asked.clear()
        parsed = parse_request(body, settings, "", service, elements)
        if turn < 4:
            await context_module.context(None, None, settings, parsed, "", service)
            if turn == 3:
                assert asked == items[-3:]  # the new ones only
        else:
            with pytest.raises(APIError) as refused:
                await context_module.context(None, None, settings, parsed, "", service)
            assert refused.value.status == 400 and "msg_nowhere" in refused.value.message
            assert asked == items[-4:]
