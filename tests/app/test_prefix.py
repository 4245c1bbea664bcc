"""The prefix service (``app.prefix``) and the Chat Completions face's use of it: a next turn decodes
as a fresh decode would — the same models, turns and errors — while only the messages past the
longest common prefix with the turn before are validated; what is kept stays within one byte budget,
per tenant, and only once a request was planned."""

from __future__ import annotations

import copy
from typing import Any

import httpx
import orjson
import pytest

from app.api.chat.decode import chat_ask
from app.api.chat.parse import parse_request
from app.backends import Backend
from app.backends.vllm import Vllm
from app.conversation import Turn
from app.errors import APIError
from app.formats import Formats
from app.parser_choice import ParserChoice
from app.pipeline import validate
from app.pipeline.ask import Ask
from app.pipeline.offload import is_light
from app.pipeline.plan import plan_request
from app.pipeline.validate import check_ask
from app.prefix import (
    ANCHOR_BYTES,
    DIGESTED,
    HEAD,
    OUTCOMES,
    SEEN_BYTES,
    PrefixService,
    keep_after,
    scope_of,
    unit,
    unit_bytes,
    units_bytes,
)
from app.settings import Settings
from app.templates.chat_template import ChatTemplate
from app.templates.prompt import TemplateProfile, template_messages
from bench.agent import agent_request
from tests.conftest import QWEN3_TEMPLATE

SETTINGS = Settings(backend="http://127.0.0.1:9")
TEMPLATE = ChatTemplate.load(QWEN3_TEMPLATE)
BACKEND = Backend("http://127.0.0.1:9", httpx.AsyncClient(), dialect=Vllm())
FORMATS = Formats.of(ParserChoice())


@pytest.fixture
def prefix() -> PrefixService:
    return PrefixService(64 << 20)


def body(turns: int) -> dict[str, Any]:
    return orjson.loads(orjson.dumps(agent_request(turns)))  # fresh objects, as a request's JSON gives


def fresh(request_body: dict[str, Any]) -> list[Turn]:
    """The turns without the service."""
    return chat_ask(parse_request(request_body, SETTINGS)).turns


def sighted(request_body: dict[str, Any], prefix: PrefixService, tenant: str = "") -> None:
    """The conversation seen before (as an agent's earlier turns saw it): its first sighting leaves
    its anchors, so a request of it is kept (``PrefixService.recall``)."""
    parse_request(request_body, SETTINGS, tenant, prefix)


def served(request_body: dict[str, Any], prefix: PrefixService, tenant: str = "", seen: bool = True) -> Ask:
    """The request decoded, checked, planned and kept (as the pipeline does once the backend is asked)
    — of a conversation ``seen`` before."""
    if seen:
        sighted(request_body, prefix, tenant)
    ask = chat_ask(parse_request(request_body, SETTINGS, tenant, prefix))
    check_ask(ask, SETTINGS)
    plan_request(ask, FORMATS, TEMPLATE, BACKEND)
    keep_after(ask.prefix)
    return ask


def found(request_body: dict[str, Any], prefix: PrefixService, tenant: str = "") -> int:
    """How many messages the service hands this request (without keeping it)."""
    return taken(parse_request(request_body, SETTINGS, tenant, prefix))


def taken(request: Any) -> int:
    recall = request._recall
    return sum(1 for i in range(len(request.messages)) if recall.segment(i) is not None) if recall is not None else 0


def test_a_next_turn_takes_the_decoded_messages_and_decodes_alike(prefix: PrefixService) -> None:
    served(body(6), prefix)
    request = parse_request(body(7), SETTINGS, "", prefix)
    assert taken(request) == 14  # the 2 + 12 messages of the turn before
    assert chat_ask(request).turns == fresh(body(7))
    assert request.model_dump() == parse_request(body(7), SETTINGS).model_dump()


@pytest.mark.parametrize("where", [1, 5, 13])
def test_a_changed_earlier_message_is_decoded_again_alone(prefix: PrefixService, where: int) -> None:
    """The messages before it and after it, the same at the same places, are taken."""
    served(body(6), prefix)
    changed = body(7)
    changed["messages"][where]["content"] = "edited"
    request = parse_request(changed, SETTINGS, "", prefix)
    assert taken(request) == 13
    assert request._recall.segment(where) is None
    turns = chat_ask(request).turns
    assert turns[where].text == "edited" and turns == fresh(changed)


def test_a_rewritten_last_message_keeps_all_before_it(prefix: PrefixService) -> None:
    """(The place the old reminder held holds the new turn's call: nothing there is the same.)"""
    first = body(6)
    first["messages"].append({"role": "user", "content": "reminder 1"})
    served(first, prefix)
    second = body(7)
    second["messages"].append({"role": "user", "content": "reminder 2"})
    assert found(second, prefix) == 14  # all but the reminder, which the new turn moved along
    assert chat_ask(parse_request(second, SETTINGS, "", prefix)).turns == fresh(second)


def test_a_unit_is_its_bytes_up_to_the_digest_bound_and_a_digest_past_it() -> None:
    """A file an agent read (tens of KB of tool result) is held and compared whole; only past
    ``DIGESTED`` (a large image's base64) is a unit its digest — which still counts its length."""
    read = {"role": "tool", "tool_call_id": "c1", "content": "x" * (DIGESTED - 100)}
    assert unit(read, b"u") == b"u" + orjson.dumps(read)
    assert unit_bytes(unit(read) or b"") == len(orjson.dumps(read))
    huge = {"role": "user", "content": "y" * DIGESTED}
    digested = unit(huge, b"u") or b""
    assert len(digested) < 100 and unit_bytes(digested) == len(orjson.dumps(huge))
    assert digested != unit({"role": "user", "content": "y" * (DIGESTED - 1) + "z"}, b"u")
    # summed (what an entry counts in the bound): digested units of every tag length, short units and long
    units = [unit(huge, tag) or b"" for tag in (b"", b"u", b"t" * 16)]
    units += [unit(v, b"u") or b"" for v in ("", "ok", "z" * 40, "z" * 60, read)]
    assert units_bytes(units) == sum(map(unit_bytes, units)) == 3 * len(orjson.dumps(huge)) + sum(map(len, units[3:]))
    assert units_bytes([]) == 0


@pytest.mark.parametrize("where", [1, 2])
def test_units_alike_in_their_anchored_bytes_are_still_compared_whole(prefix: PrefixService, where: int) -> None:
    """Anchors read the first ``ANCHOR_BYTES`` of a unit (and its length): two conversations whose
    first messages differ only past that find each other's entry as a candidate — and take nothing
    of it where the bytes differ, so each decodes (and renders) its own messages."""
    first = body(6)
    first["messages"][where]["content"] = "a" * (2 * ANCHOR_BYTES)
    served(first, prefix)
    second = body(7)
    second["messages"][where]["content"] = "a" * ANCHOR_BYTES + "b" + "a" * (ANCHOR_BYTES - 1)
    request = parse_request(second, SETTINGS, "", prefix)
    assert request._recall is not None and request._recall.segment(where) is None  # not taken: it differs
    assert taken(request) == 13  # the others are the same at the same places
    assert chat_ask(request).turns == fresh(second)


@pytest.mark.parametrize(("was", "now"), [(True, 1), (1, 1.0), (0, False), ("1", 1), (None, "")])
def test_an_equal_value_of_another_type_is_decoded_again(prefix: PrefixService, was: Any, now: Any) -> None:
    """``True == 1 == 1.0`` in Python; exact bytes tell them apart."""
    first = body(3)
    first["messages"][5]["n"] = was
    served(first, prefix)
    second = body(4)
    second["messages"][5]["n"] = now
    request = parse_request(second, SETTINGS, "", prefix)
    assert taken(request) == 7 and request._recall.segment(5) is None
    assert chat_ask(request).turns[5].extra == {"n": now}


def test_numbers_booleans_and_object_arguments_are_reused_exactly(prefix: PrefixService) -> None:
    """Exact bytes need no "plain" messages: a number, a boolean, object arguments all reuse."""
    first = body(3)
    first["messages"][1]["content"] = [{"type": "text", "text": "go", "weight": 1}]
    first["messages"][4]["tool_calls"][0]["function"]["arguments"] = {"b": 1, "a": True}
    first["messages"][4]["priority"] = 2.5
    served(first, prefix)
    second = copy.deepcopy(first)
    second["messages"].extend(body(4)["messages"][8:])
    request = parse_request(second, SETTINGS, "", prefix)
    assert taken(request) == 8
    assert chat_ask(request).turns == fresh(copy.deepcopy(second))


def test_errors_in_new_messages_are_the_errors_of_a_whole_decode(prefix: PrefixService) -> None:
    served(body(6), prefix)
    bad = body(7)
    bad["messages"][15]["content"] = None  # a tool message without content
    bad["messages"][14]["role"] = "robot"

    def error(request_body: dict[str, Any], service: PrefixService | None) -> tuple[int, str, str | None]:
        with pytest.raises(APIError) as caught:
            chat_ask(parse_request(request_body, SETTINGS, "", service))
        return caught.value.status, caught.value.message, caught.value.param

    cold = error(copy.deepcopy(bad), None)
    assert cold[0] == 400 and cold[2] is not None and cold[2].startswith("messages.14")
    assert error(bad, prefix) == cold


def test_legacy_function_messages_are_decoded_whole(prefix: PrefixService) -> None:
    """Deprecated ``function`` messages get ids by their position in the whole list: never reused or kept."""
    served(body(6), prefix)
    legacy = body(7)
    legacy["messages"].append({"role": "function", "name": "nothing_called", "content": "late"})
    request = parse_request(legacy, SETTINGS, "", prefix)
    assert request._recall is None
    turns = chat_ask(request).turns
    assert turns[-1].tool_call_id == f"call_fn{len(legacy['messages']) - 1}" and turns == fresh(legacy)


def test_what_one_tenant_decoded_is_not_known_to_another(prefix: PrefixService) -> None:
    served(body(6), prefix, "alice")
    assert found(body(7), prefix, "bob") == 0
    assert found(body(7), prefix, "alice") == 14


def test_undeclared_fields_in_another_order_are_decoded_again(prefix: PrefixService) -> None:
    """Fields the request model does not declare reach the template in their order."""
    first = body(3)
    first["messages"][5] = {**first["messages"][5], "prefix": "a", "tag": "b"}
    served(first, prefix)
    second = body(4)
    second["messages"][5] = {"tag": "b", **second["messages"][5], "prefix": "a"}
    request = parse_request(second, SETTINGS, "", prefix)
    assert taken(request) == 7 and request._recall.segment(5) is None
    assert list(chat_ask(request).turns[5].extra) == ["tag", "prefix"]


def test_a_refused_request_leaves_nothing(prefix: PrefixService) -> None:
    """Only a planned request is kept: a refused one cannot spare its successor the checks."""
    deep = body(6)
    deep["messages"][-2]["tool_calls"][0]["function"]["arguments"] = "[" * 200 + "]" * 200
    sighted(deep, prefix)  # (else a first sighting: nothing would be kept in any case)
    ask = chat_ask(parse_request(deep, SETTINGS, "", prefix))
    assert ask.prefix is not None
    with pytest.raises(APIError):
        check_ask(ask, SETTINGS)
    assert len(prefix) == 0
    assert found(body(7), prefix) == 0


def test_a_growing_conversation_is_kept_once(prefix: PrefixService) -> None:
    """An entry the next turn extends (or rewrites the last message of) is dropped: one conversation
    holds one entry; the tool schemas' encodings are kept beside."""
    for turns in range(2, 12):
        served(body(turns), prefix)
        assert sum(1 for _ in prefix._keyed) == 0 and len(prefix._anchored) == 5  # 3 prefixes, 2 places
    entries = len(prefix) - len(memo_keys(prefix))
    assert entries == 1
    served(body(12), prefix, "bob")
    assert len(prefix) - len(memo_keys(prefix)) == 2


def memo_keys(prefix: PrefixService) -> list[Any]:
    """The keys of what the service holds beside entries: ``tojson`` answers and tool definitions."""
    return [key for key in prefix._held if isinstance(key, bytes) or (isinstance(key, tuple) and key[0] == "tools")]


def test_everything_kept_stays_within_the_budget() -> None:
    prefix = PrefixService(400_000)
    for i in range(12):
        request_body = body(20)
        request_body["messages"][1]["content"] = f"task {i}"  # twelve conversations of ~60 KB each
        served(request_body, prefix)
        assert prefix.bytes <= prefix.max_bytes
        assert prefix.bytes == sum(size for size, _ in prefix._held.values())
    assert 1 < len(prefix) < 12 + len(memo_keys(prefix))
    held = {id(entry) for _, entry in prefix._held.values()}
    assert all(id(entry) in held for bucket in prefix._anchored.values() for entry in bucket)  # the index agrees
    tiny = PrefixService(1000)
    served(body(20), tiny)
    assert tiny.bytes <= 1000


def test_off_means_nothing_found_nothing_kept() -> None:
    prefix = PrefixService(0)
    served(body(6), prefix)
    assert found(body(7), prefix) == 0 and len(prefix) == 0


def test_a_conversation_is_weighed_by_what_is_new(prefix: PrefixService) -> None:
    """An agent's request with a 12 KB system prompt, twelve 1.5 KB tools and a finished turn is
    heavy when first seen; from its next turn on, the turns decoded and rendered for the request
    before do not count: each turn is light however long the conversation grows (up to
    ``KNOWN_LIGHT_CHARS``), whoever rendered the turn before."""
    assert not is_light(chat_ask(parse_request(body(1), SETTINGS, "", prefix)))
    served(body(1), prefix)
    for turns in range(2, 100):
        ask = chat_ask(parse_request(body(turns), SETTINGS, "", prefix))
        assert ask.reused == 2 + 2 * (turns - 1) and is_light(ask)
        check_ask(ask, SETTINGS)
        plan_request(ask, FORMATS, TEMPLATE, BACKEND)
        keep_after(ask.prefix)
    unplanned = chat_ask(parse_request(body(100), SETTINGS, "", prefix))  # never planned: nothing kept of it
    assert unplanned.reused
    prefix.clear()
    ask = chat_ask(parse_request(body(101), SETTINGS, "", prefix))
    assert ask.reused == 0 and not is_light(ask)


def test_reused_calls_are_not_checked_again(prefix: PrefixService) -> None:
    """``check_ask`` walks the handed-back calls of the turns that are new; a call too deep in a new
    turn is still refused."""
    served(body(6), prefix)
    seen: list[int] = []
    real = validate.arguments_nesting
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(validate, "arguments_nesting", lambda arguments: seen.append(1) or real(arguments))
        assert served(body(7), prefix).reused == 14
    assert len(seen) == 1  # the one new call
    deep = body(8)
    deep["messages"][-2]["tool_calls"][0]["function"]["arguments"] = "[" * 200 + "]" * 200
    ask = chat_ask(parse_request(deep, SETTINGS, "", prefix))
    assert ask.reused == 16
    with pytest.raises(APIError) as caught:
        check_ask(ask, SETTINGS)
    assert caught.value.code == "arguments_too_deep"


def test_tool_results_as_user_turns_leave_the_turns_given_alone() -> None:
    """Reused turns are shared by later requests: rendering never changes one."""
    turns = [Turn("user", "go"), Turn("tool", "one", tool_call_id="a"), Turn("tool", "two", tool_call_id="b"),
             Turn("user", "more", extra={"_tool_results": True}), Turn("tool", "three", tool_call_id="c")]
    before = copy.deepcopy(turns)
    messages = template_messages(turns, TemplateProfile(renders_results=False))
    assert [m["content"] for m in messages] == ["go", "one\n\ntwo", "more", "three"]
    assert turns == before


def test_units_and_scopes_tell_apart_what_decodes_apart() -> None:
    assert unit({"a": 1}) != unit({"a": 1.0}) != unit({"a": True})
    assert unit({"a": 1, "b": 2}) != unit({"b": 2, "a": 1})
    assert scope_of("t", "chat") != scope_of("tc", "hat") != scope_of("t", "messages")


def test_short_conversations_are_decoded_and_rendered_whole_longer_ones_resumed(prefix: PrefixService) -> None:
    """Below ``min_units`` messages the bookkeeping would cost more than it saves: nothing is
    looked up or kept."""
    messages = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"m{i}"} for i in range(8)]
    for n in (1, 2, 3):
        served({"messages": messages[:n]}, prefix)
        assert len(prefix) == 0
    for n in (4, 5, 6):
        ask = served({"messages": messages[:n]}, prefix)
    assert len(prefix) == 1 and ask.reused == 5 and ask.prefix is not None and ask.prefix.resume.reused > 0


def test_a_first_sighting_costs_what_no_service_costs(prefix: PrefixService, monkeypatch: pytest.MonkeyPatch) -> None:
    """A conversation nothing is kept under and none of whose anchors was seen (a one-off request):
    only its first units are encoded, its anchors noted (in the bound); it is decoded and rendered
    as without the service — no note, no render state — and nothing is kept of it. Its next
    request is kept, the one after takes from it."""
    from app.api.chat import parse as chat_parse

    drawn = 0

    def counted(value: Any, tag: bytes = b"", data: bytes | None = None) -> bytes | None:
        nonlocal drawn
        drawn += 1
        return unit(value, tag, data)

    monkeypatch.setattr(chat_parse, "unit", counted)
    request = parse_request(body(20), SETTINGS, "", prefix)
    assert request._recall is None and drawn == HEAD  # of 42 messages
    ask = chat_ask(request)
    plan = plan_request(ask, FORMATS, TEMPLATE, BACKEND)
    assert ask.prefix is None and plan.render is None
    assert plan.prompt == plan_request(chat_ask(parse_request(body(20), SETTINGS)), FORMATS, TEMPLATE, BACKEND).prompt
    assert len(prefix) == 0 and prefix.sightings == 4 and prefix.bytes == 4 * SEEN_BYTES  # 2 prefixes, 2 places
    drawn = 0
    ask = served(body(21), prefix, seen=False)  # the conversation goes on: seen before, so kept
    assert drawn == 44 and ask.prefix is not None and ask.reused == 0 and ask.prefix.resume.state is not None
    assert found(body(22), prefix) == 44


def test_an_agents_first_turn_sights_its_conversation(prefix: PrefixService) -> None:
    """Too short to keep (a system prompt and a task), an agent's first request is sighted all the
    same: its second is kept, its third takes from it."""
    assert parse_request(body(0), SETTINGS, "", prefix)._recall is None
    assert len(prefix) == 0 and prefix.sightings == 2  # its first 2 units, the one at place 1
    ask = served(body(1), prefix, seen=False)
    assert ask.prefix is not None and ask.prefix.resume.state is not None
    assert found(body(2), prefix) == 4


def test_a_one_message_request_is_looked_up_without_digests_and_notes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """One unit tells no conversation (its anchor alone is shared by many): a one-message request —
    a chat client's one-off question — costs the service no digest, notes nothing and reports no
    bytes held; it is counted as a lookup too short to keep."""
    looked: list[str] = []
    held: list[int] = []
    prefix = PrefixService(64 << 20, on_lookup=looked.append, on_held=held.append)

    def no_digests(*_: Any) -> Any:
        raise AssertionError("a one-unit lookup made its anchors")

    monkeypatch.setattr("app.prefix._anchors", no_digests)
    request = {"model": "m", "messages": [{"role": "user", "content": "Say hello."}]}
    assert parse_request(request, SETTINGS, "", prefix)._recall is None
    assert looked == ["short"] and held == [] and prefix.recalls == 1
    assert len(prefix) == 0 and prefix.sightings == 0 and prefix.bytes == 0
    # kept from one unit on: not too short, never seen either — and no digest made for it
    keeping = PrefixService(64 << 20, min_units=1, on_lookup=looked.append, on_held=held.append)
    assert parse_request(request, SETTINGS, "", keeping)._recall is None
    assert looked == ["short", "first_sight"] and held == [] and keeping.sightings == 0 and keeping.bytes == 0


def test_each_lookup_and_what_is_held_are_reported() -> None:
    """What the metrics count (``toolwire_prefix_lookups_total``, ``toolwire_prefix_bytes``)."""
    looked: list[str] = []
    held: list[int] = []
    prefix = PrefixService(64 << 20, on_lookup=looked.append, on_held=held.append)
    parse_request(body(0), SETTINGS, "", prefix)  # an agent's first turn
    served(body(1), prefix, seen=False)  # its second: seen, kept
    parse_request(body(2), SETTINGS, "", prefix)  # its third: found
    other = body(6)
    other["messages"][1]["content"], other["messages"][2]["content"] = "another task", "another step"
    parse_request(other, SETTINGS, "", prefix)
    responses = scope_of("", "responses")
    prefix.recall_response("", "resp_none", responses)
    prefix.recall_conversation("", "conv_1", responses)  # a stored conversation's decoding
    prefix.recall_items("", "conv_1", responses)  # its items: a kind of its own
    prefix.keep_items("", "conv_1", responses, ["its items"], 64)
    assert prefix.recall_items("", "conv_1", responses) == ["its items"]
    assert looked == ["short", "kept", "found", "first_sight", "chain_missed", "chain_missed", "items_missed",
                      "items_found"]
    assert set(looked) <= set(OUTCOMES) and held[-1] == prefix.bytes > 0
    prefix.clear()
    assert held[-1] == 0


def test_sightings_are_the_tenants_own_and_bounded_with_the_rest(prefix: PrefixService) -> None:
    parse_request(body(6), SETTINGS, "alice", prefix)
    assert parse_request(body(6), SETTINGS, "bob", prefix)._recall is None  # bob's first sighting
    assert parse_request(body(6), SETTINGS, "alice", prefix)._recall is not None
    small = PrefixService(10 * 4 * SEEN_BYTES)  # ten conversations' sightings

    def one_off(i: int) -> dict[str, Any]:  # the same system prompt (its anchor alone tells nothing), the rest not
        request_body = body(6)
        request_body["messages"][1]["content"] = f"task {i}"
        request_body["messages"][2]["content"] = f"step {i}"
        return request_body

    for i in range(30):
        assert parse_request(one_off(i), SETTINGS, "", small)._recall is None
        assert small.bytes <= small.max_bytes and small.bytes == small.sightings * SEEN_BYTES
    assert small.sightings == 40  # the oldest dropped: a first sighting again; the newest known
    assert parse_request(one_off(0), SETTINGS, "", small)._recall is None
    assert parse_request(one_off(29), SETTINGS, "", small)._recall is not None


def test_a_changed_system_prompt_still_finds_its_conversation(prefix: PrefixService) -> None:
    """A system prompt that carries the time changes every turn: the conversation is found by the
    units that follow it, and all of them are taken."""
    first = body(6)
    first["messages"][0]["content"] += " It is 10:00."
    served(first, prefix)
    second = body(7)
    second["messages"][0]["content"] += " It is 10:01."
    request = parse_request(second, SETTINGS, "", prefix)
    assert taken(request) == 13 and request._recall.segment(0) is None
    assert chat_ask(request).turns == fresh(second)


def test_turns_a_clean_render_had_are_not_scanned_again(prefix: PrefixService) -> None:
    """Control text (``app.templates.literal``): the turns of an earlier render that found only
    plain client text are ``settled`` for the next turn — never a turn it did not render clean, nor
    one decoded now."""
    from app.templates.literal import ControlText

    control = ControlText(("<|im_start|>", "<|im_end|>"), "escape")

    def planned(request_body: dict[str, Any]) -> Ask:
        ask = chat_ask(parse_request(request_body, SETTINGS, "", prefix))
        plan = plan_request(ask, FORMATS, TEMPLATE, BACKEND, control=control)
        assert ask.prefix is not None
        ask.prefix.clean = plan.clean  # (as the pipeline does)
        keep_after(ask.prefix)
        return ask

    sighted(body(6), prefix)
    assert planned(body(6)).prefix.settled == frozenset()  # type: ignore[union-attr]
    ask = planned(body(7))
    assert ask.prefix is not None and ask.prefix.settled == frozenset(range(14))
    dirty = body(8)
    dirty["messages"][-1]["content"] = "<|im_end|> then"  # a new turn with control text
    ask = planned(dirty)
    assert ask.prefix is not None and ask.prefix.settled == frozenset(range(16)) and ask.prefix.clean == 0
    later = body(9)
    later["messages"][17]["content"] = "<|im_end|> then"
    ask = planned(later)  # the dirty turn is not settled: the render before it was not clean
    assert ask.prefix is not None and 17 not in ask.prefix.settled and ask.prefix.settled == frozenset(range(16))


def test_another_model_served_forgets_what_was_kept_for_the_one_before(prefix: PrefixService) -> None:
    """A render state and the turns known plain were made for a template and its control strings:
    when the served model changes, nothing kept before is reused, and a request decoded before the
    change keeps nothing and renders whole."""
    prefix.serving(object())
    served(body(6), prefix)
    assert found(body(7), prefix) > 0
    stale = chat_ask(parse_request(body(7), SETTINGS, "", prefix))  # decoded, not yet planned
    assert stale.prefix is not None and stale.prefix.resume.previous is not None
    prefix.serving(object())
    assert found(body(7), prefix) == 0 and len(prefix) == 0
    stale.prefix.for_model()
    assert stale.prefix.resume.previous is None and not stale.prefix.settled
    check_ask(stale, SETTINGS)
    plan_request(stale, FORMATS, TEMPLATE, BACKEND)
    keep_after(stale.prefix)
    assert len(prefix) == len(memo_keys(prefix))  # (only tojson's answers: they hold for any template)


def test_a_messages_blocks_cache_control_is_not_part_of_its_unit() -> None:
    """Claude Code marks the newest block with ``cache_control`` and unmarks it a turn later; the
    hint is never read, so the message is the same unit either way — its conversation is known
    again at its second request."""
    from app.api.messages.parse import message_unit, parse
    from app.api.messages.protocol import MessagesRequest

    def text(value: str, marked: bool = False) -> dict[str, Any]:
        return {"type": "text", "text": value, **({"cache_control": {"type": "ephemeral"}} if marked else {})}

    assert message_unit({"role": "user", "content": [text("hi", True)]}) == unit({"role": "user", "content": [text("hi")]})
    assert message_unit({"role": "user", "content": "hi"}) == unit({"role": "user", "content": "hi"})
    prefix = PrefixService(64 << 20)

    def request(*messages: dict[str, Any]) -> dict[str, Any]:
        return {"model": "m", "max_tokens": 8, "system": [text("You are Claude Code.", True)], "messages": list(messages)}

    first = {"role": "user", "content": [text("Fix it.", True)]}
    assert parse(MessagesRequest, request(first), SETTINGS, "t", prefix)._recall is None  # sighted
    later = request({"role": "user", "content": [text("Fix it.")]}, {"role": "assistant", "content": [text("On it.")]},
                    {"role": "user", "content": [text("Go on.", True)]})
    assert parse(MessagesRequest, later, SETTINGS, "t", prefix)._recall is not None  # known again: kept


# ------------------------------------------------------------------ tool definitions


def test_an_agents_next_turn_takes_its_tools_as_validated_and_offered_before(prefix: PrefixService) -> None:
    """The same tools' bytes, the same conversation seen before: the tool definitions are not
    validated again, and the next request is offered the very ``Tool`` objects of the last —
    whose derived parts (``Tool.once``) are worked out once. The turns and the prompt are a
    fresh decode's."""
    first = served(body(6), prefix)
    request = parse_request(body(7), SETTINGS, "", prefix)
    ask = chat_ask(request)
    assert len(ask.tools) == 12 and all(a is b for a, b in zip(ask.tools, first.tools, strict=True))
    unplanned = body(8)
    unplanned["tools"][0]["function"]["description"] = "changed"
    chat_ask(parse_request(unplanned, SETTINGS, "", prefix))  # decoded, never planned: its tools are not kept
    assert not any(key[0] == "tools" and key[2] == unit(unplanned["tools"]) for key in memo_keys(prefix))
    cold = chat_ask(parse_request(body(7), SETTINGS))
    assert [t.shown for t in ask.tools] == [t.shown for t in cold.tools]
    assert [t.spec for t in ask.tools] == [t.spec for t in cold.tools]
    check_ask(ask, SETTINGS)
    assert plan_request(ask, FORMATS, TEMPLATE, BACKEND).prompt == plan_request(cold, FORMATS, TEMPLATE, BACKEND).prompt


def test_tools_changed_by_a_byte_another_tenant_or_no_service_are_decoded_again(prefix: PrefixService) -> None:
    first = served(body(6), prefix)
    changed = body(7)
    changed["tools"][3]["function"]["parameters"]["properties"]["path"]["maxLength"] = 1.0  # was absent
    ask = chat_ask(parse_request(changed, SETTINGS, "", prefix))
    assert not any(a is b for a, b in zip(ask.tools, first.tools, strict=True))
    assert ask.tools[3].spec.parameters["properties"]["path"]["maxLength"] == 1.0
    assert [t.shown for t in ask.tools] == [t.shown for t in chat_ask(parse_request(changed, SETTINGS)).tools]
    served(body(6), prefix, "bob")
    bobs = chat_ask(parse_request(body(7), SETTINGS, "bob", prefix))
    assert not any(a is b for a, b in zip(bobs.tools, first.tools, strict=True))
    off = PrefixService(0)
    served(body(6), off)
    assert len(off) == 0 and off.bytes == 0


def test_a_bad_request_with_known_tools_gets_the_whole_requests_error(prefix: PrefixService) -> None:
    """A request whose tools were validated before is validated without them: its problem is still
    the one a whole validation reports."""
    served(body(6), prefix)
    bad = body(7)
    bad["messages"][14]["role"] = "robot"
    with pytest.raises(APIError) as warm:
        parse_request(bad, SETTINGS, "", prefix)
    with pytest.raises(APIError) as cold:
        parse_request(copy.deepcopy(bad), SETTINGS)
    assert str(warm.value) == str(cold.value) and "messages.14" in str(warm.value)
    no_tools = body(7)
    no_tools["tools"] = [{"type": "function", "function": {"name": ""}}]  # invalid: never taken from the service
    with pytest.raises(APIError):
        parse_request(no_tools, SETTINGS, "", prefix)


def test_a_tools_derived_parts_are_worked_out_once(prefix: PrefixService, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the pipeline works out from a tool — its schema's check key, the size of its JSON —
    is worked out for the first request that offers it, not for the next turns'."""
    made = 0
    real = validate.schema_text

    def counted(schema: Any) -> Any:
        nonlocal made
        made += 1
        return real(schema)

    monkeypatch.setattr(validate, "schema_text", counted)
    served(body(6), prefix)
    assert made == 12
    for turns in (7, 8):
        ask = served(body(turns), prefix, seen=False)
        assert ask.prefix is not None and ask.reused > 0 and is_light(ask)
    assert made == 12


def test_messages_tools_are_taken_as_validated_and_offered_before() -> None:
    """The Messages face: the same objects for the same tools' bytes — deferred tools offered only
    once loaded, whichever request loaded them."""
    from app.api.messages.decode import messages_ask, tools_offered
    from app.api.messages.parse import parse
    from app.api.messages.protocol import MessagesRequest
    from app.thinking_signature import ThinkingSigner
    from bench.shapes import messages_body

    prefix = PrefixService(64 << 20)

    def parse_and_keep(request_body: dict[str, Any]) -> Any:
        request = parse(MessagesRequest, request_body, SETTINGS, "t", prefix)
        ask = messages_ask(request, ThinkingSigner(b"k"))
        plan_request(ask, FORMATS, TEMPLATE, BACKEND)
        keep_after(ask.prefix)
        return request

    parse(MessagesRequest, messages_body(3), SETTINGS, "t", prefix)  # sighted
    first = parse_and_keep(messages_body(4))
    second = parse_and_keep(messages_body(5))
    assert first.tools and second.tools is first.tools
    assert all(a is b for a, b in zip(tools_offered(second, set()), tools_offered(first, set()), strict=True))
    cold = parse(MessagesRequest, messages_body(5), SETTINGS)
    assert [t.shown for t in tools_offered(second, set())] == [t.shown for t in tools_offered(cold, set())]
    deferred = messages_body(6)
    deferred["tools"][2]["defer_loading"] = True
    kept = parse_and_keep(deferred)
    again = parse(MessagesRequest, deferred, SETTINGS, "t", prefix)
    assert again.tools is kept.tools
    name = deferred["tools"][2]["name"]
    assert name not in {t.spec.name for t in tools_offered(again, set())}
    assert name in {t.spec.name for t in tools_offered(again, {name})}


def test_responses_tools_are_taken_as_offered_before_and_never_narrowed_in_place() -> None:
    """The Responses face: a conversation's next turn (sent whole, or continuing a chain) is
    offered the tool set made for the last; a request that narrows it (``allowed_tools``) gets a
    set of its own, and the next request is offered every tool again."""
    from app.api.responses.parse import parse_request as parse_responses
    from bench.shapes import responses_tools

    prefix = PrefixService(64 << 20)
    items = [{"role": "user", "content": f"step {i}"} for i in range(4)]
    whole = {"model": "m", "input": items, "tools": responses_tools()}
    parse_responses(orjson.loads(orjson.dumps(whole)), SETTINGS, "t", prefix)
    assert len(prefix) == 0 and prefix.sightings == 1  # a first sighting: a digest of their names alone
    first = parse_responses(orjson.loads(orjson.dumps(whole)), SETTINGS, "t", prefix)
    second = parse_responses(orjson.loads(orjson.dumps(whole)), SETTINGS, "t", prefix)
    assert second.tools is first.tools and len(first.tools.functions) == len(responses_tools())
    chained = {"model": "m", "input": "go on", "previous_response_id": "resp_1", "tools": responses_tools()}
    assert parse_responses(chained, SETTINGS, "t", prefix).tools is first.tools
    for _ in range(3):  # another tenant never gets them
        assert parse_responses(orjson.loads(orjson.dumps(whole)), SETTINGS, "u", prefix).tools is not first.tools
    one = first.tools.functions[0].spec.name
    narrowed = {**chained, "tool_choice": {"type": "allowed_tools", "mode": "auto",
                                           "tools": [{"type": "function", "name": one}]}}
    assert [t.spec.name for t in parse_responses(narrowed, SETTINGS, "t", prefix).tools.functions] == [one]
    assert parse_responses(chained, SETTINGS, "t", prefix).tools.functions == first.tools.functions
    assert len(first.tools.functions) == len(responses_tools())



def test_tools_sent_once_are_not_encoded_for_the_prefix_service(monkeypatch: pytest.MonkeyPatch) -> None:
    """A request whose tools are never sent again (a one-off) costs what it costs without the
    service: its tools are not encoded for it (only a digest of their names is noted); sent again,
    they are kept, and the request after takes them."""
    import app.prefix as prefix_module
    from app.api.responses.parse import parse_request as parse_responses
    from bench.shapes import responses_tools

    encoded = 0

    def counted(value: Any, tag: bytes = b"") -> bytes | None:
        nonlocal encoded
        encoded += 1
        return unit(value, tag)

    monkeypatch.setattr(prefix_module, "unit", counted)
    prefix = PrefixService(64 << 20)
    one_off = {"model": "m", "input": [{"role": "user", "content": f"part {i}"} for i in range(6)],
               "tools": responses_tools()}  # as long as an agent's turn: it could have been one
    first = parse_responses(one_off, SETTINGS, "v", prefix)
    assert encoded == 0 and len(prefix) == 0 and prefix.bytes == SEEN_BYTES
    second = parse_responses(one_off, SETTINGS, "v", prefix)
    assert encoded == 1 and second.tools is not first.tools and len(prefix) == 1
    assert parse_responses(one_off, SETTINGS, "v", prefix).tools is second.tools
