"""Messages decoded before (``app.api.chat.known``): a next turn decodes as a fresh decode would —
the same models, turns and errors — while only its new messages are validated."""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest

from app.api.chat import decode
from app.api.chat.decode import chat_ask, parse_request, prepared
from app.api.chat.known import KnownMessages
from app.api.chat.protocol import ChatCompletionRequest
from app.conversation import Turn
from app.errors import APIError
from app.pipeline import validate
from app.pipeline.ask import Ask
from app.pipeline.offload import is_light
from app.pipeline.validate import check_ask
from app.settings import Settings
from app.templates.prompt import TemplateProfile, template_messages
from bench.agent import agent_request

SETTINGS = Settings(backend="http://127.0.0.1:9")


@pytest.fixture(autouse=True)
def fresh_cache(monkeypatch: pytest.MonkeyPatch) -> KnownMessages:
    known = KnownMessages()
    monkeypatch.setattr(decode, "KNOWN", known)
    return known


def body(turns: int) -> dict[str, Any]:
    return orjson.loads(orjson.dumps(agent_request(turns)))  # fresh objects, as a request's JSON gives


def fresh(request_body: dict[str, Any]) -> list[Turn]:
    """The turns without the cache."""
    return chat_ask(parse_request(request_body, Settings(backend="http://127.0.0.1:9", render_cache_bytes=0))).turns


def test_a_next_turn_takes_the_known_messages_and_decodes_alike(fresh_cache: KnownMessages) -> None:
    chat_ask(parse_request(body(6), SETTINGS))
    request = parse_request(body(7), SETTINGS)
    assert request._known.count == 14  # the 2 + 12 messages of the turn before
    turns = chat_ask(request).turns
    assert turns == fresh(body(7))
    whole = parse_request(body(7), Settings(backend="http://127.0.0.1:9", render_cache_bytes=0))
    assert request.model_dump() == whole.model_dump()


@pytest.mark.parametrize("where", [1, 5, 13])
def test_a_changed_earlier_message_is_decoded_again(where: int) -> None:
    chat_ask(parse_request(body(6), SETTINGS))
    changed = body(7)
    changed["messages"][where]["content"] = "edited"
    request = parse_request(changed, SETTINGS)
    assert request._known.count <= where
    turns = chat_ask(request).turns
    assert turns[where].text == "edited" and turns == fresh(changed)


def test_an_equal_value_of_another_type_is_decoded_again() -> None:
    """``True == 1`` in Python; a message with ``"n": 1`` is not the one with ``"n": true``."""
    first = body(3)
    first["messages"][3]["n"] = True
    chat_ask(parse_request(first, SETTINGS))
    second = body(4)
    second["messages"][3]["n"] = 1
    request = parse_request(second, SETTINGS)
    assert request._known.count <= 3
    assert chat_ask(request).turns[3].extra == {"n": 1}


def test_errors_in_new_messages_are_the_errors_of_a_whole_decode() -> None:
    chat_ask(parse_request(body(6), SETTINGS))
    bad = body(7)
    bad["messages"][15]["content"] = None  # a tool message without content
    bad["messages"][14]["role"] = "robot"

    def error(request_body: dict[str, Any], settings: Settings) -> tuple[int, str, str | None]:
        with pytest.raises(APIError) as caught:
            chat_ask(parse_request(request_body, settings))
        return caught.value.status, caught.value.message, caught.value.param

    cold = error(copy.deepcopy(bad), Settings(backend="http://127.0.0.1:9", render_cache_bytes=0))
    assert cold[0] == 400 and cold[2] is not None and cold[2].startswith("messages.14")
    assert error(bad, SETTINGS) == cold


def test_legacy_function_messages_are_decoded_whole() -> None:
    """Deprecated ``function`` messages get ids by their position in the whole list."""
    chat_ask(parse_request(body(6), SETTINGS))
    legacy = body(7)
    legacy["messages"].append({"role": "function", "name": "nothing_called", "content": "late"})
    request = parse_request(legacy, SETTINGS)
    assert request._known.count == 0
    turns = chat_ask(request).turns
    assert turns[-1].tool_call_id == f"call_fn{len(legacy['messages']) - 1}" and turns == fresh(legacy)


def test_the_cache_stays_within_its_bytes(fresh_cache: KnownMessages) -> None:
    settings = Settings(backend="http://127.0.0.1:9", render_cache_bytes=200_000)
    for i in range(12):
        request_body = body(20)
        request_body["messages"][1]["content"] = f"task {i}"  # twelve conversations of ~30 KB
        chat_ask(parse_request(request_body, settings))
        assert fresh_cache.bytes_held <= 200_000
    assert 0 < len(fresh_cache) < 12


def test_tool_results_as_user_turns_leave_the_turns_given_alone() -> None:
    """Known turns are shared by later requests: rendering never changes one."""
    turns = [Turn("user", "go"), Turn("tool", "one", tool_call_id="a"), Turn("tool", "two", tool_call_id="b"),
             Turn("user", "more", extra={"_tool_results": True}), Turn("tool", "three", tool_call_id="c")]
    before = copy.deepcopy(turns)
    messages = template_messages(turns, TemplateProfile(renders_results=False))
    assert [m["content"] for m in messages] == ["go", "one\n\ntwo", "more", "three"]
    assert turns == before


def test_what_one_tenant_decoded_is_not_known_to_another() -> None:
    chat_ask(parse_request(body(6), SETTINGS, "alice"))
    assert parse_request(body(7), SETTINGS, "bob")._known.count == 0
    assert parse_request(body(7), SETTINGS, "alice")._known.count == 14


def test_undeclared_fields_in_another_order_are_decoded_again() -> None:
    """Fields the request model does not declare reach the template in their order: an equal
    message with them in another order is another message."""
    first = body(3)
    first["messages"][3] = {**first["messages"][3], "prefix": "a", "tag": "b"}
    chat_ask(parse_request(first, SETTINGS))
    second = body(4)
    second["messages"][3] = {"tag": "b", **second["messages"][3], "prefix": "a"}
    request = parse_request(second, SETTINGS)
    assert request._known.count == 3
    assert list(chat_ask(request).turns[3].extra) == ["tag", "prefix"]
    same_order = body(4)
    same_order["messages"][3] = {**same_order["messages"][3], "prefix": "a", "tag": "b"}
    assert parse_request(same_order, SETTINGS)._known.count == 8  # the 2 + 6 of the request before


@pytest.mark.parametrize("change", ["number in a part", "object arguments", "number field"])
def test_a_message_equal_values_could_hide_in_is_not_kept(change: str) -> None:
    """Messages with a number, a boolean, or arguments as an object (whose key order the template
    shows) are kept only up to before them: ``==`` cannot tell them apart from their look-alikes."""
    first = body(3)
    message = first["messages"][4]  # the second turn's assistant message
    if change == "number in a part":
        first["messages"][1]["content"] = [{"type": "text", "text": "go", "weight": 1}]
        where = 1
    elif change == "object arguments":
        message["tool_calls"][0]["function"]["arguments"] = {"b": 1, "a": "x"}
        where = 4
    else:
        message["priority"] = 1
        where = 4
    chat_ask(parse_request(first, SETTINGS))
    second = copy.deepcopy(first)
    second["messages"].extend(body(4)["messages"][8:])
    request = parse_request(second, SETTINGS)
    assert request._known.count == (where if where >= 4 else 0)  # fewer than 4 kept messages: none kept
    assert chat_ask(request).turns == fresh(copy.deepcopy(second))


def test_an_edited_message_keeps_what_comes_before_it() -> None:
    chat_ask(parse_request(body(10), SETTINGS))
    edited = body(10)
    edited["messages"][13]["content"] = "edited"
    request = parse_request(edited, SETTINGS)
    assert request._known.count == 13
    assert chat_ask(request).turns == fresh(edited)


def test_a_growing_conversation_is_kept_once(fresh_cache: KnownMessages) -> None:
    """A list the next turn extends is dropped: one conversation holds one list."""
    for turns in range(2, 12):
        chat_ask(parse_request(body(turns), SETTINGS))
        assert len(fresh_cache) == 1
    chat_ask(parse_request(body(12), SETTINGS, "bob"))
    assert len(fresh_cache) == 2


def test_a_conversation_prepared_here_is_weighed_by_what_is_new() -> None:
    """An agent's request with a 12 KB system prompt, twelve 1.5 KB tools and a finished turn is
    heavy when first seen; from its next turn on, the turns known from the request before do not
    count: each turn is light however long the conversation grows (up to ``KNOWN_LIGHT_CHARS``). A
    conversation first seen large (prepared by a worker: this process lacks its render) stays heavy."""
    def planned(request: ChatCompletionRequest) -> Ask:
        """The request decoded and planned where ``is_light`` says (as ``app.api.answer.plan`` does)."""
        ask = chat_ask(request)
        ask.planned_on_loop = is_light(ask)
        prepared(request, ask)
        return ask

    assert not planned(parse_request(body(1), SETTINGS)).planned_on_loop  # by a worker
    for turns in range(2, 100):
        ask = planned(parse_request(body(turns), SETTINGS))
        assert ask.known_turns == 2 + 2 * (turns - 1) and ask.known_rendered == (turns > 2)
        assert ask.planned_on_loop
    refused = parse_request(body(100), SETTINGS)
    chat_ask(refused)  # never prepared (say it was refused): the next turn is weighed whole
    ask = chat_ask(parse_request(body(101), SETTINGS))
    assert ask.known_turns == 0 and not is_light(ask)
    assert len(ask.turns) > 64  # heavy by its length alone
    first_seen_large = body(70)
    first_seen_large["messages"][1]["content"] = "another task"
    assert not planned(parse_request(first_seen_large, SETTINGS)).planned_on_loop
    next_turn = body(71)
    next_turn["messages"][1]["content"] = "another task"
    ask = chat_ask(parse_request(next_turn, SETTINGS))
    assert ask.known_turns == 142 and not ask.known_rendered and not is_light(ask)


def test_known_calls_are_not_checked_again() -> None:
    """``check_ask`` walks the handed-back calls of the turns that are new: the known ones passed it
    in the request that was planned. A call too deep in a new turn is still refused."""
    def planned(request_body: dict[str, Any]) -> Ask:
        request = parse_request(request_body, SETTINGS)
        ask = chat_ask(request)
        check_ask(ask, SETTINGS)
        ask.planned_on_loop = True
        prepared(request, ask)
        return ask

    planned(body(6))
    seen: list[int] = []
    real = validate.arguments_nesting
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(validate, "arguments_nesting", lambda arguments: seen.append(1) or real(arguments))
        assert planned(body(7)).known_turns == 14
    assert len(seen) == 1  # the one new call
    deep = body(8)
    deep["messages"][-2]["tool_calls"][0]["function"]["arguments"] = "[" * 200 + "]" * 200
    ask = chat_ask(parse_request(deep, SETTINGS))
    assert ask.known_turns == 16
    with pytest.raises(APIError) as caught:
        check_ask(ask, SETTINGS)
    assert caught.value.code == "arguments_too_deep"


def test_the_declared_fields_are_the_request_models() -> None:
    """A field taken for declared skips the order check: the list must be the model's own."""
    from app.api.chat.known import DECLARED
    from app.api.chat.protocol import ChatMessage

    assert set(ChatMessage.model_fields) == DECLARED
