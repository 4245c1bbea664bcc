"""The ids the Responses API gives input items that came without one (``normalised_input``)."""

from __future__ import annotations

import re

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
