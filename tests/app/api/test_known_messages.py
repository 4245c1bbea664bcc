"""A request validated but for the messages validated before (``validated_but_known``), and which
those are (``Recall.known``): the same request as validating it whole, whichever messages are known."""

from __future__ import annotations

import random
from typing import Any

import pytest
from pydantic import ValidationError

from app.api.chat.protocol import ChatCompletionRequest
from app.api.protocol import validated_but_known
from app.prefix import PrefixService, scope_of, unit


def _body(n: int) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "be brief"}]
    for i in range(n):
        messages.append({"role": "user", "content": f"question {i}"})
        messages.append({"role": "assistant", "content": f"answer {i}"})
    return {"model": "m", "messages": messages}


@pytest.mark.parametrize("seed", range(20))
def test_known_messages_are_put_back_in_their_places(seed: int) -> None:
    body = _body(12)
    whole = ChatCompletionRequest.model_validate(body)
    pick = random.Random(seed)
    known = [m if pick.random() < 0.6 else None for m in whole.messages]
    got = validated_but_known(ChatCompletionRequest.model_validate, body, known)
    assert got.messages == whole.messages
    assert all(g is k for g, k in zip(got.messages, known, strict=True) if k is not None)  # the known models themselves


def test_a_bad_message_among_the_unknown_ones_fails_and_a_miscount_is_refused() -> None:
    body = _body(3)
    body["messages"][4] = {"role": "assistant", "content": 7}
    whole = ChatCompletionRequest.model_validate(_body(3))
    known = [whole.messages[0], None, None, None, None, whole.messages[5], None]
    with pytest.raises(ValidationError):
        validated_but_known(ChatCompletionRequest.model_validate, body, known)
    with pytest.raises(ValueError, match="6 messages known of 7"):
        validated_but_known(ChatCompletionRequest.model_validate, _body(3), known[:6])


def test_recall_knows_the_payload_where_a_run_starts_and_none_elsewhere() -> None:
    service, scope = PrefixService(1 << 20, min_units=2), scope_of("", "chat")
    messages = _body(4)["messages"]
    units = [unit(m) for m in messages]
    for _ in range(2):  # sighted, then kept
        recall = service.recall(scope, units)
        assert recall is not None or _ == 0
    assert recall is not None
    for i in range(len(messages)):
        recall.after(i + 1, payload=f"model {i}")
    service.keep(recall.note([]))  # (no render state: what is kept is the units' decoding)
    edited = [*units[:3], unit({"role": "user", "content": "edited"}), *units[4:]]
    again = service.recall(scope, edited)
    assert again is not None
    runs = again.takeable()
    expected = [f"model {i}" if i < len(runs) and runs[i] is not None else None for i in range(len(messages))]
    assert again.known(0, len(messages)) == expected and expected[3] is None and expected[0] == "model 0"
    assert again.known(1, 3, str.upper) == [e.upper() if e else None for e in expected[1:4]]
    assert again.known(0, len(messages) + 2)[-2:] == [None, None]  # units past the entry's: none known
