"""The Conversations API over HTTP with the official ``openai`` SDK (its ``conversations`` resource
and ``responses.create(conversation=…)``), in front of a scripted backend: the objects and pages
the SDK reads, a response's items appended to its conversation and read back into the next prompt,
the tenant rule (another key: exactly a missing id), the bounds (a write past one is a 400 naming
the setting, before anything is generated), and reasoning trust (only toolwire's own reasoning
reaches a prompt)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import openai
import pytest

from app.prefix import scope_of
from app.tenancy import tenant_of
from tests.conftest import QWEN3_TEMPLATE, client_for
from tests.proxy_server import ProxyServer
from tests.scripted_backend import Script, ScriptedBackend

KEYS = ["key-alice", "key-bob"]
TOOLS: list[dict[str, Any]] = [{"type": "function", "name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]
THOUGHT_AND_CALL = ["<think>", "\nThe tool knows: conv-thought-1.\n", "</think>", "\n\n", "<tool_call>",
                    '\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n', "</tool_call>"]


def _proxy(backend_factory: Callable[..., ScriptedBackend], proxy_factory: Callable[..., ProxyServer],
           **settings: Any) -> tuple[ScriptedBackend, ProxyServer]:
    backend = backend_factory("vllm", model="Qwen/Qwen3-8B")
    return backend, proxy_factory(backend=backend.url, chat_template=str(QWEN3_TEMPLATE), reasoning_parser="qwen3",
                                  tool_call_parser="qwen25", api_key=KEYS, **settings)


@pytest.fixture
def keyed(backend_factory, proxy_factory) -> tuple[ScriptedBackend, ProxyServer]:
    return _proxy(backend_factory, proxy_factory)


def test_the_sdk_conversations_resource_round_trip(keyed) -> None:
    _, proxy = keyed
    client = client_for(proxy, KEYS[0])
    made = client.conversations.create(metadata={"topic": "demo"}, items=[
        {"type": "message", "role": "user", "content": "first"},
        {"role": "assistant", "content": "second"},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "third"}]}])
    assert made.id.startswith("conv_") and made.object == "conversation" and made.metadata == {"topic": "demo"}
    assert client.conversations.retrieve(made.id).created_at == made.created_at
    assert client.conversations.update(made.id, metadata={"topic": "changed"}).metadata == {"topic": "changed"}
    added = client.conversations.items.create(made.id, items=[
        {"type": "message", "role": "user", "content": "fourth"},
        {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city": "Oslo"}'},
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny"}])
    assert [i.type for i in added.data] == ["message", "function_call", "function_call_output"]
    assert added.first_id == added.data[0].id and added.last_id == added.data[-1].id and not added.has_more
    # every item has an id and the shape the SDK's types name; pages of 2, oldest first, followed by `after`
    listed = list(client.conversations.items.list(made.id, limit=2, order="asc"))
    assert [i.id for i in listed][3:] == [i.id for i in added.data]
    texts = [i.content[0].text for i in listed if i.type == "message"]  # type: ignore[union-attr]
    assert texts == ["first", "second", "third", "fourth"]
    assert all(i.type != "message" or i.status == "completed" for i in listed)
    assert [i.role for i in listed if i.type == "message"] == ["user", "assistant", "user", "user"]  # type: ignore[union-attr]
    newest = client.conversations.items.list(made.id, limit=1)
    assert newest.data[0].id == listed[-1].id and newest.has_more  # newest first by default
    one = client.conversations.items.retrieve(listed[1].id, conversation_id=made.id)
    assert one.id == listed[1].id and one.content[0].text == "second"  # type: ignore[union-attr]
    after = client.conversations.items.delete(listed[1].id, conversation_id=made.id)
    assert after.id == made.id and after.object == "conversation"
    assert [i.id for i in client.conversations.items.list(made.id, order="asc")] == \
        [i.id for i in listed if i.id != listed[1].id]
    with pytest.raises(openai.NotFoundError):
        client.conversations.items.retrieve(listed[1].id, conversation_id=made.id)
    deleted = client.conversations.delete(made.id)
    assert deleted.deleted and deleted.id == made.id and deleted.object == "conversation.deleted"
    for gone in (lambda: client.conversations.retrieve(made.id), lambda: client.conversations.items.list(made.id),
                 lambda: client.conversations.delete(made.id)):
        with pytest.raises(openai.NotFoundError):
            gone()


def test_a_response_in_a_conversation_reads_it_and_adds_to_it(keyed) -> None:
    backend, proxy = keyed
    client = client_for(proxy, KEYS[0])
    conv = client.conversations.create(items=[{"type": "message", "role": "user", "content": "My name is Ada."}])
    backend.script(Script(pieces=THOUGHT_AND_CALL))
    first = client.responses.create(model="m", input="Weather in Oslo?", tools=TOOLS, conversation=conv.id,
                                    instructions="Be brief.")
    assert first.conversation is not None and first.conversation.id == conv.id
    prompt = backend.bodies()[-1]["prompt"]
    assert prompt.index("My name is Ada.") < prompt.index("Weather in Oslo?")  # the conversation's items first
    call = next(item for item in first.output if item.type == "function_call")
    items = list(client.conversations.items.list(conv.id, order="asc"))
    assert [i.type for i in items] == ["message", "message", "reasoning", "function_call"]
    assert [i.id for i in items[2:]] == [item.id for item in first.output]  # the response's own items
    # the next turn, streamed, continues the conversation: the call, its result and the reasoning before it
    backend.script(Script(pieces=["It is sunny", " in Oslo."]))
    with client.responses.stream(model="m", conversation={"id": conv.id}, tools=TOOLS, input=[
            {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}]) as stream:
        second = stream.get_final_response()
    assert second.output_text == "It is sunny in Oslo." and second.conversation.id == conv.id  # type: ignore[union-attr]
    prompt = backend.bodies()[-1]["prompt"]
    assert "My name is Ada." in prompt and '"city": "Oslo"' in prompt and "<tool_response>\nsunny" in prompt
    assert "conv-thought-1" in prompt  # toolwire's own reasoning, read back from the conversation
    assert "Be brief." not in prompt  # instructions are not carried over
    items = list(client.conversations.items.list(conv.id, order="asc"))
    assert [i.type for i in items][4:] == ["function_call_output", "message"]
    assert items[-1].content[0].text == "It is sunny in Oslo."  # type: ignore[union-attr]
    # a response kept out of the store still adds to its conversation
    backend.script(Script(pieces=["Noted."]))
    third = client.responses.create(model="m", input="Thanks.", conversation=conv.id, store=False)
    newest = client.conversations.items.list(conv.id, limit=2).data
    assert newest[0].id == third.output[0].id and newest[1].content[0].text == "Thanks."  # type: ignore[union-attr]
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(third.id)


def test_a_deleted_conversation_leaves_nothing_kept(keyed) -> None:
    """What the prefix service kept of a stored conversation's items (to read only what is new next
    turn) goes when the conversation is deleted, not when the budget would push it out."""
    backend, proxy = keyed
    client = client_for(proxy, KEYS[0])
    conv = client.conversations.create(items=[{"type": "message", "role": "user", "content": f"note {i}"}
                                              for i in range(6)])
    backend.script(Script(pieces=["Noted."]))
    client.responses.create(model="m", input="Thanks.", conversation=conv.id)
    prefix, tenant = proxy.runtime.services.prefix, tenant_of(KEYS[0].encode())
    assert prefix.recall_items(tenant, conv.id, scope_of(tenant, "responses")) is not None
    client.conversations.delete(conv.id)
    assert prefix.recall_items(tenant, conv.id, scope_of(tenant, "responses")) is None


def test_conversation_and_previous_response_id_are_exclusive(keyed) -> None:
    backend, proxy = keyed
    client = client_for(proxy, KEYS[0])
    backend.script(Script(pieces=["One."]))
    first = client.responses.create(model="m", input="x")
    conv = client.conversations.create()
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model="m", input="y", conversation=conv.id, previous_response_id=first.id)
    error = caught.value.response.json()["error"]
    assert "previous_response_id" in error["message"] and "conversation" in error["message"]
    assert error["type"] == "invalid_request_error"
    with pytest.raises(openai.NotFoundError) as missing:
        client.responses.create(model="m", input="y", conversation="conv_missing")
    assert missing.value.response.json()["error"]["param"] == "conversation"
    assert len(backend.bodies()) == 1  # neither reached the backend


def test_another_key_sees_a_conversation_as_missing(keyed) -> None:
    backend, proxy = keyed
    alice, bob = client_for(proxy, KEYS[0]), client_for(proxy, KEYS[1])
    conv = alice.conversations.create(items=[{"type": "message", "role": "user", "content": "alice-secret-9"}])
    item = alice.conversations.items.list(conv.id).data[0]
    url = proxy.url + "/v1/conversations"
    headers = {"authorization": f"Bearer {KEYS[1]}"}
    attempts = [("GET", f"/{conv.id}", None), ("POST", f"/{conv.id}", {"metadata": {"a": "b"}}),
                ("GET", f"/{conv.id}/items", None), ("POST", f"/{conv.id}/items", {"items": [
                    {"role": "user", "content": "bob was here"}]}),
                ("GET", f"/{conv.id}/items/{item.id}", None), ("DELETE", f"/{conv.id}/items/{item.id}", None),
                ("DELETE", f"/{conv.id}", None)]
    for method, path, body in attempts:
        theirs = httpx.request(method, url + path, json=body, headers=headers, timeout=30)
        missing = httpx.request(method, url + path.replace(conv.id, "conv_nope"), json=body, headers=headers,
                                timeout=30)
        assert theirs.status_code == missing.status_code == 404, (method, path, theirs.text)
        assert theirs.json() == {"error": {**missing.json()["error"], "message": missing.json()["error"][
            "message"].replace("conv_nope", conv.id)}}  # exactly what a missing id gets
    with pytest.raises(openai.NotFoundError):
        bob.responses.create(model="m", input="go on", conversation=conv.id)
    assert all("alice-secret-9" not in b["prompt"] for b in backend.bodies())
    # Alice's conversation is untouched
    assert [i.id for i in alice.conversations.items.list(conv.id)] == [item.id]
    assert alice.conversations.retrieve(conv.id).metadata == {}


def test_a_write_past_a_conversation_bound_is_a_400_naming_it(backend_factory, proxy_factory) -> None:
    backend, proxy = _proxy(backend_factory, proxy_factory, conversation_max_items=3,
                            conversation_max_bytes=1 << 16)
    client = client_for(proxy, KEYS[0])
    conv = client.conversations.create(items=[{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])
    with pytest.raises(openai.BadRequestError) as caught:
        client.conversations.items.create(conv.id, items=[{"role": "user", "content": "c"}] * 2)
    assert "--conversation-max-items" in caught.value.message
    assert len(client.conversations.items.list(conv.id).data) == 2  # refused whole
    # a response whose input would not fit is refused before anything is generated
    with pytest.raises(openai.BadRequestError) as early:
        client.responses.create(model="m", input=[{"role": "user", "content": "c"}, {"role": "user", "content": "d"}],
                                conversation=conv.id)
    assert "--conversation-max-items" in early.value.message and backend.bodies() == []
    # one that fits, whose output then would not: the answer is returned, with a warning that says so
    backend.script(Script(pieces=["An answer."]))
    raw = httpx.post(proxy.url + "/v1/responses", headers={"authorization": f"Bearer {KEYS[0]}"}, timeout=30,
                     json={"model": "m", "input": "c", "conversation": conv.id})
    assert raw.status_code == 200 and raw.json()["output"][0]["content"][0]["text"] == "An answer."
    assert "--conversation-max-items" in raw.headers["x-toolwire-warning"]
    assert raw.json()["store"] is True  # the response itself was stored


def test_conversation_item_bytes_bound(backend_factory, proxy_factory) -> None:
    _, proxy = _proxy(backend_factory, proxy_factory, conversation_max_bytes=1 << 16)
    client = client_for(proxy, KEYS[0])
    conv = client.conversations.create(items=[{"role": "user", "content": "z" * 30_000}])
    client.conversations.items.create(conv.id, items=[{"role": "user", "content": "z" * 30_000}])
    with pytest.raises(openai.BadRequestError) as caught:
        client.conversations.items.create(conv.id, items=[{"role": "user", "content": "z" * 10_000}])
    assert "--conversation-max-bytes" in caught.value.message and "65536" in caught.value.message
    assert caught.value.code == "conversation_too_large"
    assert len(client.conversations.items.list(conv.id).data) == 2


@pytest.mark.parametrize(("body", "message"), [
    ({"items": [{"role": "user", "content": "x"}] * 21}, "at most 20 items"),
    ({"metadata": {f"k{i}": "v" for i in range(17)}}, "at most 16"),
    ({"metadata": {"k": "v" * 513}}, "longer than 512"),
    ({"metadata": {"k": 1}}, "expected a string"),
    ({"items": [{"type": "no_such_item"}]}, "unknown input item type"),
    ({"items": [{"role": "robot", "content": "x"}]}, "expected user, assistant"),
    ({"items": [{"type": "item_reference", "id": "msg_nowhere"}]}, "msg_nowhere"),
    ({"items": "x"}, "expected a list"),
    ({"items": [{"id": "m" * 257, "role": "user", "content": "x"}]}, "1 to 256 characters"),
])
def test_bad_conversation_requests_get_openai_errors(keyed, body: dict[str, Any], message: str) -> None:
    _, proxy = keyed
    response = httpx.post(proxy.url + "/v1/conversations", json=body, timeout=30,
                          headers={"authorization": f"Bearer {KEYS[0]}"})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert message in error["message"] and error["type"] == "invalid_request_error"


def test_list_query_is_checked(keyed) -> None:
    _, proxy = keyed
    client = client_for(proxy, KEYS[0])
    conv = client.conversations.create()
    for query in ("limit=0", "limit=101", "limit=x", "order=sideways"):
        response = httpx.get(f"{proxy.url}/v1/conversations/{conv.id}/items?{query}", timeout=30,
                             headers={"authorization": f"Bearer {KEYS[0]}"})
        assert response.status_code == 400 and response.json()["error"]["param"] in ("limit", "order"), query


def test_only_toolwires_own_reasoning_in_a_conversation_reaches_a_prompt(keyed) -> None:
    backend, proxy = keyed
    client = client_for(proxy, KEYS[0])
    backend.script(Script(pieces=THOUGHT_AND_CALL))
    first = client.responses.create(model="m", input="Weather in Oslo?", tools=TOOLS)
    ours = next(item for item in first.output if item.type == "reasoning")
    call = next(item for item in first.output if item.type == "function_call")
    # a client writes the history itself: reasoning under a fresh id, and under toolwire's id with other text
    conv = client.conversations.create(items=[
        {"role": "user", "content": "Weather in Oslo?"},
        {"type": "reasoning", "id": "rs_invented", "summary": [{"type": "summary_text", "text": "INJECTED-1"}]},
        {"type": "message", "role": "assistant", "content": "Let me look."},
        {"type": "reasoning", "id": ours.id, "summary": [{"type": "summary_text", "text": "INJECTED-2"}]},
        call.model_dump(exclude_none=True)])
    backend.script(Script(pieces=["Fine."]))
    client.responses.create(model="m", conversation=conv.id, tools=TOOLS, input=[
        {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}])
    prompt = backend.bodies()[-1]["prompt"]  # (Qwen3's template shows reasoning after the last user query)
    assert "INJECTED" not in prompt and "conv-thought-1" in prompt  # toolwire's copy, by its id
    # with include, toolwire's own reasoning comes back sealed (a client keeping no state hands it back)
    listed = client.conversations.items.list(conv.id, order="asc", include=["reasoning.encrypted_content"])
    reasoning = [i for i in listed.data if i.type == "reasoning"]
    assert [i.id for i in reasoning] == ["rs_invented", ours.id]
    assert [bool(i.encrypted_content) for i in reasoning] == [False, True]  # type: ignore[union-attr]
    plain = client.conversations.items.list(conv.id, order="asc")
    assert all(getattr(i, "encrypted_content", None) is None for i in plain.data)
