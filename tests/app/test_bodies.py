"""A request body parsed again only past what an earlier body of its conversation held
(``app.bodies``, through ``PrefixService.read_body``): always ``orjson.loads``'s answer and errors."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.bodies import HEAD, Elements, as_elements, each, total
from app.prefix import PrefixService, scope_of

SCOPE = scope_of("", "chat")
OTHER = scope_of("someone else", "chat")


def compact(value: Any) -> bytes:
    """A body as httpx, ``JSON.stringify`` and serde write it."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


def message(i: int, text: str = "") -> dict[str, Any]:
    """A message of ~300 bytes (bodies of less than twice ``OPENING_BYTES`` are parsed whole)."""
    return {"role": "user" if i % 2 else "assistant", "content": f"message {i} {text} " + "«é» x" * 60, "n": i,
            "ok": i % 3 == 0}


def conversation(n: int, **extra: Any) -> dict[str, Any]:
    return {"model": "m", "messages": [message(i) for i in range(n)], **extra}


def read(service: PrefixService, raw: bytes, scope: bytes = SCOPE) -> tuple[Any, Elements | None]:
    body, elements = service.read_body(scope, raw, "messages")
    assert body == orjson.loads(raw)  # whatever was reused: the body's own parse
    return body, elements


def test_a_grown_conversation_parses_only_its_new_elements() -> None:
    """Sighted, then kept: the next body reuses every element the last one held — the same
    objects — and encodes only the new ones; each element's JSON is the unit it would encode to."""
    service = PrefixService(64 << 20)
    read(service, compact(conversation(6, stream=True)))  # sighted
    _, first = read(service, compact(conversation(8, stream=True)))  # sighted before: its layout kept
    assert first is not None and first.reused == 0 and first.layout is not None and len(first.layout.jsons) == 8
    body, grown = read(service, compact(conversation(11, stream=True)))
    assert grown is not None and grown.reused == 8
    assert all(a is b for a, b in zip(body["messages"][:8], first.layout.items, strict=True))
    assert grown.jsons == [orjson.dumps(m) for m in body["messages"]]
    assert grown.layout is not None and len(grown.layout.jsons) == 11


def test_a_rewritten_last_element_reuses_those_before_it() -> None:
    service = PrefixService(64 << 20)
    for n in (6, 8):
        read(service, compact(conversation(n)))
    body = conversation(8)
    body["messages"][-1]["content"] = "rewritten"
    _, elements = read(service, compact(body))
    assert elements is not None and elements.reused == 7


def test_an_edited_element_reuses_those_around_it_and_leaves_a_layout() -> None:
    """An element edited in place (past the body's opening, ``OPENING_BYTES``: an edit there files
    the body elsewhere): the elements before it and after it are the last body's — the same
    objects — only the edited one and the new ones are parsed and encoded."""
    service = PrefixService(64 << 20)
    for n in (6, 8):
        _, before = read(service, compact(conversation(n)))
    assert before is not None and before.layout is not None
    body = conversation(9)
    body["messages"][4]["content"] = "edited"
    parsed, elements = read(service, compact(body))
    assert elements is not None and elements.reused == 8 and elements.replaced == 4
    assert [a is b for a, b in zip(parsed["messages"], before.layout.items, strict=False)] == [True] * 4 + [False] + [True] * 3
    assert elements.jsons == [orjson.dumps(m) for m in body["messages"]]
    assert elements.layout is not None and len(elements.layout.jsons) == 9
    _, after = read(service, compact({**body, "messages": [*body["messages"], message(9)]}))
    assert after is not None and after.reused == 9 and after.replaced is None
    head = {"model": "m", "instructions": "Be brief. " * 120}  # the first element past the opening
    for n in (6, 8):
        read(service, compact({**head, **conversation(n)}))
    body = {**head, **conversation(8)}
    body["messages"][0]["content"] = "the first, edited"  # no run before it
    _, first = read(service, compact(body))
    assert first is not None and first.replaced == 0 and first.reused == 8


@pytest.mark.parametrize("change", ["nested copy", "spaced", "two edits", "dropped", "inserted"])
def test_what_is_not_one_element_edited_in_place_parses_as_before(change: str) -> None:
    """The elements after an edit found inside the edited one (it holds their bytes), an edited
    element not in compact JSON, two edits, an element dropped or inserted: not taken as one
    element edited — the body parses as it is, reusing the elements before the change."""
    service = PrefixService(64 << 20)
    for n in (7, 9):
        read(service, compact(conversation(n)))
    messages = conversation(9)["messages"]
    if change == "nested copy":
        messages[3] = {**messages[3], "copies": [message(99), *messages[4:]]}
    elif change == "two edits":
        messages[3] = {**messages[3], "content": "one"}
        messages[6] = {**messages[6], "content": "two"}
    elif change == "dropped":
        del messages[3]
    elif change == "inserted":
        messages.insert(3, message(50))
    raw = compact({"model": "m", "messages": messages})
    if change == "spaced":
        messages[3] = {**messages[3], "content": "edited"}
        raw = compact({"model": "m", "messages": messages})
        element = compact(messages[3])
        raw = raw.replace(element, json.dumps(messages[3], ensure_ascii=False).encode())
    _, elements = read(service, raw)
    assert elements is not None and elements.replaced is None and elements.reused == 3


def test_a_first_sighting_encodes_only_its_first_elements_and_keeps_nothing() -> None:
    """A one-off body (its first elements never sighted) costs what it costs without the service:
    its first ``HEAD`` elements encoded (the units the service's lookup reads anyway), no layout."""
    service = PrefixService(64 << 20)
    _, elements = read(service, compact(conversation(20)))
    assert elements is not None and len(elements.jsons) == HEAD and elements.layout is None
    assert len(service) == 0


def test_a_conversation_whose_early_element_changes_every_turn_is_kept() -> None:
    """Sighted as the prefix service sights conversations (by its first elements, each telling):
    an element edited at every turn (a repo map re-sent) does not keep the body from leaving its
    layout — and then only what changed is parsed; one-off bodies sharing only their first
    element (a system prompt) leave nothing."""
    service = PrefixService(64 << 20)
    system = {"role": "system", "content": "You are an agent. " * 80}  # past the body's opening
    for i in range(5):
        others = conversation(8 + i)["messages"][1:]
        others = [system, *({**m, "content": f"one-off {i} " + "x" * 300} for m in others)]
        _, elements = read(service, compact({"model": "m", "messages": others}))
        assert elements is not None and elements.layout is None
    kept = []
    for turn in range(4):
        body = conversation(8 + turn)
        body["messages"][:2] = [system, {**body["messages"][1], "content": f"repo map, turn {turn}"}]
        _, elements = read(service, compact(body))
        assert elements is not None
        kept.append((elements.layout is not None, elements.reused, elements.replaced))
    assert kept == [(False, 0, None), (True, 0, None), (True, 9, 1), (True, 10, 1)]


def test_another_tenant_reuses_nothing() -> None:
    service = PrefixService(64 << 20)
    for n in (6, 8):
        read(service, compact(conversation(n)))
    _, elements = read(service, compact(conversation(9)), OTHER)
    assert elements is not None and elements.reused == 0


def test_the_list_found_elsewhere_first_is_told_apart() -> None:
    """The list's place is found by its first element's JSON — here first inside another field,
    so the layout is wrong: its use is caught (the stand-in is not the list's first element) and
    the body parsed whole."""
    service = PrefixService(64 << 20)
    for n in (6, 8):
        read(service, compact({"meta": [message(0)], **conversation(n)}))
    _, elements = read(service, compact({"meta": [message(0)], **conversation(9)}))
    assert elements is not None and elements.reused == 0


def test_spaced_json_is_parsed_whole() -> None:
    """A client writing JSON with spaces (Python's ``json.dumps`` defaults) gets no layout: its
    elements are not where their compact JSON would be."""
    service = PrefixService(64 << 20)
    for n in (6, 8, 9):
        body, elements = service.read_body(SCOPE, json.dumps(conversation(n)).encode(), "messages")
        assert body == conversation(n) and elements is not None and elements.reused == 0 and elements.layout is None


@pytest.mark.parametrize("tail", [b"", b"]", b"}", b',"x"', b',{"role":', b"]}]", b'],"model":"m"}}', b"\xff"])
def test_a_broken_body_fails_as_its_own_parse(tail: bytes) -> None:
    """Whatever follows the reused elements, the answer is ``orjson.loads``'s — its error included."""
    service = PrefixService(64 << 20)
    for n in (6, 8):
        read(service, compact(conversation(n)))
    raw = compact(conversation(9))
    broken = raw[:raw.rindex(b"]")] + tail
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(broken)
    with pytest.raises(orjson.JSONDecodeError):
        service.read_body(SCOPE, broken, "messages")


@pytest.mark.parametrize("between", [b" ", b";", b"]", b",,"])
def test_elements_in_place_but_not_comma_separated_fail_as_their_own_parse(between: bytes) -> None:
    """The elements a layout holds, each at its place, but one not after a comma: not the same list."""
    service = PrefixService(64 << 20)
    for n in (6, 8):
        read(service, compact(conversation(n)))
    raw = compact(conversation(9))
    cut = raw.index(compact(message(5))) - 1
    broken = raw[:cut] + between + raw[cut + 1:]
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(broken)
    with pytest.raises(orjson.JSONDecodeError):
        service.read_body(SCOPE, broken, "messages")


def test_layouts_are_in_the_budget() -> None:
    service = PrefixService(64 << 20)
    for n in (6, 8):
        read(service, compact(conversation(n)))
    assert service.bytes > sum(len(compact(m)) for m in conversation(8)["messages"])
    small = PrefixService(2048)
    for n in (60, 80):
        read(small, compact(conversation(n)))
    assert small.bytes <= 2048
    service.clear()
    _, elements = read(service, compact(conversation(9)))
    assert elements is not None and elements.reused == 0


def test_a_body_without_the_list_or_short_is_parsed_as_it_is() -> None:
    service = PrefixService(64 << 20)
    pad = "x" * 4096
    for raw in (b'{"messages":"text","pad":"%s"}' % pad.encode(), b'[1,2,"%s"]' % pad.encode(),
                b'{"model":"m","pad":"%s"}' % pad.encode(), b'"%s"' % pad.encode(), compact(conversation(2))):
        assert service.read_body(SCOPE, raw, "messages") == (orjson.loads(raw), None)


_TEXT = st.text(alphabet=st.sampled_from(list('ab"\\],[{}: \n\u00e9\u2028\U0001f600')), max_size=12)
_MESSAGE = st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant", "tool"]), "content": _TEXT},
                                 optional={"n": st.integers(-5, 10**12), "f": st.floats(allow_nan=False,
                                           allow_infinity=False), "list": st.lists(_TEXT, max_size=3),
                                           "obj": st.dictionaries(_TEXT, _TEXT, max_size=2)})


@settings(max_examples=150, deadline=None)
@given(first=st.lists(_MESSAGE, min_size=4, max_size=8), steps=st.lists(st.tuples(
    st.sampled_from(["append", "rewrite", "edit", "drop", "reorder", "spaced", "break"]), st.integers(0, 20),
    st.lists(_MESSAGE, max_size=3)), max_size=8))
def test_any_sequence_of_bodies_parses_as_each_alone(first: list[dict[str, Any]],
                                                      steps: list[tuple[str, int, list[dict[str, Any]]]]) -> None:
    """Bodies of a conversation changed at random — appended, the last rewritten, one edited or
    dropped, keys reordered, written with spaces, cut short — each parses to what ``orjson.loads``
    gives (or fails as it does)."""
    service = PrefixService(64 << 20)
    messages = [{"role": "system", "content": "You are an agent. " * 120}, *first]  # past twice OPENING_BYTES
    grown = [("append", 0, [message(i)]) for i in range(3)]  # sighted, kept, reused
    for op, at, new in [*grown, *steps]:
        k = at % len(messages) if messages else 0
        if op == "append":
            messages = [*messages, *new]
        elif op == "rewrite" and messages:
            messages = [*messages[:-1], *(new or [{"role": "user", "content": "again"}])]
        elif op == "edit" and messages:
            messages = [*messages[:k], {**messages[k], "content": "edited"}, *messages[k + 1:]]
        elif op == "drop" and messages:
            messages = [*messages[:k], *messages[k + 1:]]
        body = {"model": "m", "messages": messages, "stream": True}
        raw = compact(dict(reversed(body.items())) if op == "reorder" else body)
        if op == "spaced":
            raw = json.dumps(body).encode()
        if op == "break":
            raw = raw[:len(raw) * (at + 1) // 22]
        try:
            expected = orjson.loads(raw)
        except orjson.JSONDecodeError:
            with pytest.raises(orjson.JSONDecodeError):
                service.read_body(SCOPE, raw, "messages")
            continue
        got, _ = service.read_body(SCOPE, raw, "messages")
        assert got == expected
    assert service.elements_reused > 0


def test_a_total_measures_only_the_elements_not_reused() -> None:
    """A face's per-element count (its limits) is summed over the new elements only: the reused
    ones' part is the running sum the body they came from left — and always the whole sum."""
    service = PrefixService(64 << 20)
    measured: list[int] = []

    def measure(item: Any) -> int:
        measured.append(item["n"])
        return item["n"] + 1

    def count(raw: bytes) -> int:
        body, elements = read(service, raw)
        got = total(elements, body["messages"], "n", measure)
        assert got == sum(m["n"] + 1 for m in body["messages"])
        return got

    for n in (6, 8):
        count(compact(conversation(n)))
    measured.clear()
    count(compact(conversation(11)))
    assert measured == [8, 9, 10]
    measured.clear()
    body = conversation(12)
    body["messages"][5]["n"] = 50
    count(compact(body))
    assert measured == [50, 11]  # the edited element in place, and the new one
    assert total(None, body["messages"], "n", measure) == sum(m["n"] + 1 for m in body["messages"])


def test_limits_hold_for_reused_messages() -> None:
    """A conversation grown past ``--max-input-items`` is refused, whatever was counted before."""
    from app.api.messages.parse import parse
    from app.api.messages.protocol import MessagesRequest
    from app.errors import APIError
    from app.settings import Settings

    settings = Settings(max_input_items=30)
    service = PrefixService(64 << 20)

    def turn(n: int) -> dict[str, Any]:
        return {"model": "m", "max_tokens": 8, "messages": [
            {"role": "user" if i % 2 == 0 else "assistant", "content": [
                {"type": "text", "text": f"block {i} " + "x" * 200}, {"type": "text", "text": "and more"}]}
            for i in range(n)]}

    for n in (5, 7, 9, 13):
        raw = compact(turn(n))
        body, elements = service.read_body(SCOPE, raw, "messages")
        parse(MessagesRequest, body, settings, "", service, elements)
    assert service.elements_reused > 0
    body, elements = service.read_body(SCOPE, compact(turn(17)), "messages")  # 34 blocks
    with pytest.raises(APIError, match="too many content blocks"):
        parse(MessagesRequest, body, settings, "", service, elements)


def test_what_a_face_derives_from_an_element_is_derived_once() -> None:
    """``each``: a face's units (or counts) of the reused elements are the very values it made for
    the body they came from; a first sighting draws them one by one, as asked."""
    service = PrefixService(64 << 20)
    made: list[int] = []

    def unit_of(item: Any, data: bytes | None) -> bytes:
        made.append(item["n"])
        assert data is None or data == orjson.dumps(item)
        return b"u" + orjson.dumps(item)

    body, elements = read(service, compact(conversation(6)))  # a first sighting
    drawn = each(elements, body["messages"], "unit", unit_of)
    assert made == [] and next(iter(drawn)) == b"u" + compact(message(0))  # (lazy)
    body, first = read(service, compact(conversation(8)))
    units = list(each(first, body["messages"], "unit", unit_of))
    made.clear()
    body, grown = read(service, compact(conversation(10)))
    again = list(each(grown, body["messages"], "unit", unit_of))
    assert made == [8, 9] and all(a is b for a, b in zip(again[:8], units, strict=True))
    assert again == [b"u" + orjson.dumps(m) for m in body["messages"]]
    made.clear()
    edited = conversation(10)
    edited["messages"][5]["n"] = 55
    parsed, replaced = read(service, compact(edited))
    assert list(each(replaced, parsed["messages"], "unit", unit_of)) == [b"u" + orjson.dumps(m)
                                                                         for m in parsed["messages"]]
    assert made == [55]
    made.clear()
    fresh = list(each(grown, list(body["messages"]), "unit", unit_of))
    assert fresh == again and len(made) == 10  # another list than the elements: made afresh


def test_a_copied_list_of_the_same_elements_is_known_as_them() -> None:
    """``as_elements``: a request model's copy of the body's list (the same items) stands for the
    elements, so what was derived from them is reused; another list of other items does not."""
    service = PrefixService(64 << 20)
    for n in (6, 8):
        body, elements = read(service, compact(conversation(n)))
    assert elements is not None
    copied = list(body["messages"])
    assert as_elements(elements, copied) is elements.items
    assert as_elements(elements, [dict(m) for m in copied]) is not elements.items
    assert as_elements(elements, copied[:-1]) is not elements.items and as_elements(None, copied) is copied
