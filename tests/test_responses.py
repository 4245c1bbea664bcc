"""The Responses API face over HTTP, with the official ``openai`` SDK as client, in front of scripted
backends: output items in the order the model wrote them, the streaming event contract checked
event by event with the SDK's own types, stream == non-stream, custom and namespaced tools, hosted
tools, reasoning handed back, the response store (SQLite and a real Redis), and errors."""

from __future__ import annotations

import asyncio
import json
import threading
import typing
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import openai
import pytest
from openai.types.responses import Response, ResponseStreamEvent

from tests.conftest import QWEN3_TEMPLATE, client_for
from tests.proxy_server import ProxyServer
from tests.redis_server import RedisServer
from tests.scripted_backend import Script, ScriptedBackend


def _event_classes() -> dict[str, type]:
    union = typing.get_args(ResponseStreamEvent)[0]  # Annotated[Union[...], discriminator]
    return {typing.get_args(cls.model_fields["type"].annotation)[0]: cls for cls in typing.get_args(union)}


EVENT_CLASSES = _event_classes()


class _Events:
    """Each event validated with the SDK's own class for its ``type``."""

    @staticmethod
    def validate_python(event: dict[str, Any]) -> Any:
        return EVENT_CLASSES[event["type"]].model_validate(event)  # type: ignore[attr-defined]


EVENT = _Events()
TOOLS: list[dict[str, Any]] = [
    {"type": "function", "name": "get_weather", "description": "Weather for a city",
     "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}},
    {"type": "function", "name": "search", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}},
]
APPLY_PATCH = {"type": "custom", "name": "apply_patch", "description": "Apply a patch to files",
               "format": {"type": "grammar", "syntax": "lark", "definition": 'start: "*** Begin Patch" /(.|\\n)*/'}}
PATCH = '*** Begin Patch\n*** Add File: a.txt\n+hello "world"\n*** End Patch'
REASONING_TEXT_CALLS = [
    "<think>", "\nTwo cities,", " two calls.\n", "</think>", "\n\n", "Checking both.\n", "<tool_call>",
    '\n{"name": "get_weather", "arguments": {"city": "Pa', 'ris"}}\n', "</tool_call>", "\n",
    "<tool_call>", '\n{"name": "search", "arguments": {"q": "café \\"ü\\""}}\n', "</tool_call>",
]


@pytest.fixture
def proxy(backend_factory: Callable[..., ScriptedBackend],
          proxy_factory: Callable[..., ProxyServer]) -> tuple[ScriptedBackend, ProxyServer]:
    backend = backend_factory("vllm", model="Qwen/Qwen3-8B")
    return backend, proxy_factory(backend=backend.url, chat_template=str(QWEN3_TEMPLATE), reasoning_parser="qwen3",
                                  tool_call_parser="qwen25")


def raw_events(response: httpx.Response) -> list[dict[str, Any]]:
    """The ``data:`` payloads of an SSE response, checking each ``event:`` line names its payload."""
    events, name = [], None
    for line in response.text.splitlines():
        if line.startswith("event: "):
            name = line[7:]
        elif line.startswith("data: "):
            payload = json.loads(line[6:])
            assert payload["type"] == name
            events.append(payload)
    return events


def stream_raw(proxy: ProxyServer, body: dict[str, Any]) -> list[dict[str, Any]]:
    response = httpx.post(proxy.url + "/v1/responses", json={**body, "stream": True}, timeout=30)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    return raw_events(response)


def comparable(response: dict[str, Any]) -> dict[str, Any]:
    """A response without what differs between two runs (ids, times; the reasoning-token count,
    which is shared out by how the backend's pieces happened to arrive)."""
    out = {k: v for k, v in response.items() if k not in ("id", "created_at", "completed_at")}
    if out.get("usage"):
        out["usage"] = {k: v for k, v in out["usage"].items() if k != "output_tokens_details"}
    out["output"] = [{k: v for k, v in item.items() if k not in ("id", "call_id")} for item in response["output"]]
    return out


def check_contract(events: list[dict[str, Any]]) -> dict[str, Any]:
    """The streaming contract: SDK types, sequence numbers, item bookkeeping; the final response."""
    for event in events:
        EVENT.validate_python(event)  # the SDK's own event types
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert [e["type"] for e in events[:2]] == ["response.created", "response.in_progress"]
    assert events[-1]["type"] in ("response.completed", "response.incomplete")
    final = events[-1]["response"]
    open_items: dict[int, str] = {}
    texts: dict[str, list[str]] = {}
    for e in events[2:-1]:
        if e["type"] == "response.output_item.added":
            assert e["output_index"] == len(open_items) and e["output_index"] not in open_items
            open_items[e["output_index"]] = e["item"]["id"]
        elif "item_id" in e:
            assert open_items[e["output_index"]] == e["item_id"]
            if e["type"].endswith(".delta"):
                texts.setdefault(f"{e['item_id']}/{e['type']}", []).append(e["delta"])
        if e["type"] == "response.output_item.done":
            assert final["output"][e["output_index"]] == e["item"]
    for item in final["output"]:  # the deltas add up to what the item holds
        if item["type"] == "message":
            assert "".join(texts[f"{item['id']}/response.output_text.delta"]) == item["content"][0]["text"]
        elif item["type"] == "reasoning":
            assert "".join(texts[f"{item['id']}/response.reasoning_text.delta"]) == item["content"][0]["text"]
        elif item["type"] == "function_call":
            assert "".join(texts[f"{item['id']}/response.function_call_arguments.delta"]) == item["arguments"]
        elif item["type"] == "custom_tool_call":
            assert "".join(texts[f"{item['id']}/response.custom_tool_call_input.delta"]) == item["input"]
    Response.model_validate(final)
    return final


def test_reasoning_text_and_parallel_calls_streamed_equal_whole(proxy) -> None:
    backend, server = proxy
    client = client_for(server)
    backend.script(Script(pieces=REASONING_TEXT_CALLS))
    whole = client.responses.create(model="m", input="Weather in Paris, and search?", tools=TOOLS)
    assert [item.type for item in whole.output] == ["reasoning", "message", "function_call", "function_call"]
    reasoning, message, first, second = whole.output
    assert reasoning.content and reasoning.content[0].text == "Two cities, two calls."
    assert message.content[0].text == "Checking both."  # type: ignore[union-attr]
    assert (first.name, json.loads(first.arguments)) == ("get_weather", {"city": "Paris"})  # type: ignore[union-attr]
    assert (second.name, json.loads(second.arguments)) == ("search", {"q": 'café "ü"'})  # type: ignore[union-attr]
    assert first.call_id != second.call_id  # type: ignore[union-attr]
    assert whole.status == "completed" and whole.usage is not None
    assert whole.usage.output_tokens == len(REASONING_TEXT_CALLS)
    assert whole.usage.output_tokens_details.reasoning_tokens >= 1
    for split in (1, 3):  # the backend's pieces arrive apart or together: the same events add up
        backend.script(Script(pieces=REASONING_TEXT_CALLS, delay=0.01 * split))
        final = check_contract(stream_raw(server, {"model": "m", "input": "Weather in Paris, and search?",
                                                   "tools": TOOLS}))
        assert comparable(final) == comparable(whole.model_dump(mode="json", exclude_unset=True))


def test_sdk_stream_helper_accumulates_the_same_response(proxy) -> None:
    backend, server = proxy
    backend.script(Script(pieces=REASONING_TEXT_CALLS, delay=0.005))
    with client_for(server).responses.stream(model="m", input="Weather?", tools=TOOLS) as stream:
        deltas = [e.delta for e in stream if e.type == "response.function_call_arguments.delta"]
        final = stream.get_final_response()
    assert len(deltas) >= 2 and "".join(deltas) == '{"city": "Paris"}{"q": "café \\"ü\\""}'
    assert [o.type for o in final.output] == ["reasoning", "message", "function_call", "function_call"]


def test_custom_tool_call_streams_its_input(proxy) -> None:
    backend, server = proxy
    arguments = json.dumps({"input": PATCH}, ensure_ascii=False)
    pieces = ["<tool_call>", '\n{"name": "apply_patch", "arguments": ', arguments[:9], arguments[9:20],
              arguments[20:], "}\n", "</tool_call>"]
    backend.script(Script(pieces=pieces, delay=0.005))
    final = check_contract(stream_raw(server, {"model": "m", "input": "patch it", "tools": [APPLY_PATCH]}))
    (item,) = final["output"]
    assert item["type"] == "custom_tool_call" and item["name"] == "apply_patch" and item["input"] == PATCH
    # the model was offered a function with one string parameter, and told the grammar
    prompt = backend.bodies()[-1]["prompt"]
    assert '"name": "apply_patch"' in prompt and "*** Begin Patch" in prompt
    backend.script(Script(pieces=pieces))
    whole = client_for(server).responses.create(model="m", input="patch it", tools=[APPLY_PATCH])  # type: ignore[list-item]
    assert whole.output[0].type == "custom_tool_call" and whole.output[0].input == PATCH  # type: ignore[union-attr]


def test_namespaced_and_hosted_tools_as_codex_sends_them(proxy) -> None:
    backend, server = proxy
    namespace = {"type": "namespace", "name": "multi_agent_v1", "description": "Sub-agents",
                 "tools": [{"type": "function", "name": "spawn_agent", "description": "Start one",
                            "parameters": {"type": "object", "properties": {"task": {"type": "string"}}}}]}
    call = {"name": "multi_agent_v1__spawn_agent", "arguments": {"task": "lint"}}
    backend.script(Script(pieces=[f"<tool_call>\n{json.dumps(call)}\n</tool_call>"]))
    response = httpx.post(server.url + "/v1/responses", timeout=30, json={
        "model": "m", "input": "go", "tools": [namespace, {"type": "web_search", "external_web_access": True}]})
    assert response.status_code == 200, response.text
    assert "web_search" in response.headers["x-toolwire-warning"]
    item = response.json()["output"][0]
    assert (item["type"], item["name"], item["namespace"]) == ("function_call", "spawn_agent", "multi_agent_v1")
    prompt = backend.bodies()[-1]["prompt"]
    assert "multi_agent_v1__spawn_agent" in prompt and "web_search" not in prompt
    # the call handed back with its namespace renders under the name the model was offered
    backend.script(Script(pieces=["Spawned."]))
    follow = httpx.post(server.url + "/v1/responses", timeout=30, json={"model": "m", "tools": [namespace], "input": [
        {"role": "user", "content": "go"}, {**item, "type": "function_call"},
        {"type": "function_call_output", "call_id": item["call_id"], "output": "agent-7 started"}]})
    assert follow.status_code == 200, follow.text
    prompt = backend.bodies()[-1]["prompt"]
    assert '"name": "multi_agent_v1__spawn_agent", "arguments": {"task": "lint"}' in prompt
    assert "agent-7 started" in prompt


def test_hosted_tools_can_be_refused(backend_factory, proxy_factory) -> None:
    backend = backend_factory("vllm", model="Qwen/Qwen3-8B")
    server = proxy_factory(backend=backend.url, chat_template=str(QWEN3_TEMPLATE), tool_call_parser="qwen25",
                           hosted_tools="reject")
    response = httpx.post(server.url + "/v1/responses", timeout=30,
                          json={"model": "m", "input": "hi", "tools": [{"type": "file_search"}]})
    assert response.status_code == 400 and "file_search" in response.json()["error"]["message"]


def test_stateless_round_trip_hands_reasoning_back_encrypted(proxy) -> None:
    """Codex's way: store false, include reasoning.encrypted_content, the whole history sent back."""
    backend, server = proxy
    client = client_for(server)
    backend.script(Script(pieces=REASONING_TEXT_CALLS[:9]))
    first = client.responses.create(model="m", input="Weather?", tools=TOOLS, store=False,
                                    include=["reasoning.encrypted_content"])
    reasoning, _, call = first.output
    assert reasoning.encrypted_content and "Two cities" not in reasoning.encrypted_content  # type: ignore[union-attr]
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(first.id)  # not stored
    history: list[Any] = [{"role": "user", "content": "Weather?"}]
    history += [{**reasoning.model_dump(exclude_none=True), "content": None, "summary": []}]
    history.append(call.model_dump(exclude_none=True))
    history.append({"type": "function_call_output", "call_id": call.call_id, "output": "sunny, 24°C"})  # type: ignore[union-attr]
    history = [{k: v for k, v in item.items() if v is not None} for item in history]
    store = server.runtime.services.stores.responses
    looked_up: list[list[str]] = []
    items = store.items

    async def counted(ids: list[str], *args: Any) -> Any:
        looked_up.append(list(ids))
        return await items(ids, *args)

    store.items = counted
    backend.script(Script(pieces=["It is sunny."]))
    second = client.responses.create(model="m", input=history, tools=TOOLS, store=False)
    assert second.output_text == "It is sunny."
    prompt = backend.bodies()[-1]["prompt"]
    assert "Two cities, two calls." in prompt and '"city": "Paris"' in prompt and "sunny, 24°C" in prompt
    assert looked_up == []  # its seal says its text: no stored copy is read for it
    # a tampered encrypted_content is not rendered (and a stored copy by its id is looked for)
    history[1]["encrypted_content"] = history[1]["encrypted_content"][:-4] + "AAAA"
    backend.script(Script(pieces=["ok"]))
    client.responses.create(model="m", input=history, tools=TOOLS, store=False)
    assert "Two cities" not in backend.bodies()[-1]["prompt"]
    assert looked_up == [[history[1]["id"]]]


def test_previous_response_id_continues_and_store_endpoints(proxy) -> None:
    backend, server = proxy
    client = client_for(server)
    backend.script(Script(pieces=REASONING_TEXT_CALLS[:9]))
    first = client.responses.create(model="m", input="Weather?", tools=TOOLS, instructions="Be brief.")
    call = first.output[-1]
    backend.script(Script(pieces=["It is sunny."]))
    second = client.responses.create(model="m", previous_response_id=first.id, tools=TOOLS, input=[
        {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}])  # type: ignore[union-attr]
    prompt = backend.bodies()[-1]["prompt"]
    assert "Weather?" in prompt and "Two cities, two calls." in prompt and '"city": "Paris"' in prompt
    assert "<tool_response>\nsunny\n</tool_response>" in prompt
    assert "Be brief." not in prompt  # instructions are not carried over
    assert client.responses.retrieve(second.id).output_text == "It is sunny."
    items = client.responses.input_items.list(second.id)
    assert [i.type for i in items.data] == ["function_call_output"]
    client.responses.delete(second.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(second.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="m", previous_response_id="resp_missing", input="x")


def test_a_broken_chain_is_a_400_naming_the_missing_link(proxy) -> None:
    """A→B→C with B deleted: continuing from C is a 400 that names B, never an answer that silently
    lost A's turns."""
    backend, server = proxy
    client = client_for(server)
    backend.script(Script(pieces=["one"]))
    a = client.responses.create(model="m", input="first")
    backend.script(Script(pieces=["two"]))
    b = client.responses.create(model="m", input="second", previous_response_id=a.id)
    backend.script(Script(pieces=["three"]))
    c = client.responses.create(model="m", input="third", previous_response_id=b.id)
    asked = len(backend.bodies())
    client.responses.delete(b.id)
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model="m", input="fourth", previous_response_id=c.id)
    error = refused.value.body
    assert isinstance(error, dict) and error["code"] == "previous_response_chain_broken"
    assert b.id in error["message"] and error["param"] == "previous_response_id"
    assert len(backend.bodies()) == asked  # the backend was never asked


def test_a_malformed_request_is_a_400_before_the_store_is_read(proxy) -> None:
    """The request's own fields are read whole before the store is: a tool_choice naming no tool is
    the 400 that says so, not the 404 of the response it continues (nor a 503 when the store fails
    — a retry would never help)."""
    _, server = proxy
    refused = httpx.post(server.url + "/v1/responses", json={
        "model": "m", "input": "x", "previous_response_id": "resp_missing", "tools": TOOLS,
        "tool_choice": {"type": "function", "name": "nope"}}, timeout=30)
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"]["param"] == "tool_choice"


def test_max_output_tokens_cut_is_incomplete(proxy) -> None:
    backend, server = proxy
    backend.script(Script(pieces=["<tool_call>", '\n{"name": "get_weather", "arguments": {"ci'], finish="length"))
    whole = client_for(server).responses.create(model="m", input="x", tools=TOOLS, max_output_tokens=5)
    assert whole.status == "incomplete" and whole.incomplete_details.reason == "max_output_tokens"  # type: ignore[union-attr]
    assert not any(o.type == "function_call" for o in whole.output)  # never an unfinished call as a call
    assert backend.bodies()[-1]["max_tokens"] == 5
    backend.script(Script(pieces=["Hello", " there"], finish="length"))
    final = check_contract(stream_raw(server, {"model": "m", "input": "x", "max_output_tokens": 2}))
    assert final["status"] == "incomplete"


def test_text_format_and_reasoning_effort_reach_the_backend(backend_factory, proxy_factory) -> None:
    backend = backend_factory("llamacpp", model="Qwen/Qwen3-8B")
    server = proxy_factory(backend=backend.url, chat_template=str(QWEN3_TEMPLATE), reasoning_parser="qwen3")
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    backend.script(Script(pieces=['{"city": "Paris"}']))
    response = client_for(server).responses.create(
        model="m", input="city?", reasoning={"effort": "none"},
        text={"format": {"type": "json_schema", "name": "place", "schema": schema}})
    assert response.output_text == '{"city": "Paris"}'
    body = backend.bodies()[-1]
    assert body["json_schema"] == schema
    assert body["prompt"].endswith("<think>\n\n</think>\n\n")  # thinking off in Qwen3's template


@pytest.mark.parametrize(("body", "message"), [
    ({"model": "m", "input": "x", "background": True, "store": False}, "store: true"),
    ({"model": "m"}, "input"),
    ({"model": "m", "input": [{"type": "message", "role": "user",
                               "content": [{"type": "input_image", "image_url": "x"}]}]}, "input[0].content[0].image_url"),
    ({"model": "m", "input": [{"type": "mystery"}]}, "mystery"),
    ({"model": "m", "input": "x", "tools": [{"type": "function"}]}, "tools[0].name"),
    ({"model": "m", "input": "x", "tool_choice": {"type": "function", "name": "nope"}}, "nope"),
    ({"model": "m", "input": "x", "temperature": 7}, "temperature"),
    ({"model": "m", "input": "x", "text": {"format": {"type": "xml"}}}, "text.format.type"),
])
def test_bad_requests_get_openai_errors(proxy, body: dict[str, Any], message: str) -> None:
    _, server = proxy
    response = httpx.post(server.url + "/v1/responses", json=body, timeout=30)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert message in error["message"] and error["type"] == "invalid_request_error"
    assert response.headers.get("x-request-id")


REASONING_ITEM = {"type": "reasoning", "id": "rs_1", "summary": []}


@pytest.mark.parametrize(("body", "param"), [
    ({"input": [{"type": ["message"], "role": "user", "content": "x"}]}, "input.0.type"),
    ({"input": [{"type": {"kind": "message"}}]}, "input.0.type"),
    ({"input": "x", "tools": [{"type": ["function"], "name": "f"}]}, "tools.0.type"),
    ({"input": "x", "tools": [{"type": "namespace", "name": "ns", "tools": [{"type": ["function"], "name": "f"}]}]},
     "tools.0.tools.0.type"),
    ({"input": [{**REASONING_ITEM, "content": [{"type": "reasoning_text", "text": 5}]}, "x"]},
     "input.0.content.0.text"),
    ({"input": [{**REASONING_ITEM, "summary": [{"type": "summary_text", "text": ["a"]}]}, "x"]},
     "input.0.summary.0.text"),
    ({"input": [{**REASONING_ITEM, "summary": "a"}, "x"]}, "input.0.summary"),
    ({"input": [{**REASONING_ITEM, "encrypted_content": 5}, "x"]}, "input.0.encrypted_content"),
    ({"input": "x", "tools": TOOLS, "tool_choice": {"type": "allowed_tools", "mode": "auto", "tools": 5}},
     "tool_choice.tools"),
    ({"input": "x", "text": {"format": {"type": "json_schema", "name": "r", "schema": {"type": 5}}}},
     "text.format.schema"),
    ({"input": "x", "text": {"format": {"type": "json_schema", "name": "r", "schema": {
        "type": "object", "properties": {"a": {"type": "string", "minLength": "five"}}}}}}, "text.format.schema"),
])
def test_malformed_shapes_are_400s_naming_the_field(proxy, body: dict[str, Any], param: str) -> None:
    """Client shapes that reached a 500 (an unhashable ``type``, a reasoning part whose text is not
    a string, ``allowed_tools.tools`` not a list) or the backend (an invalid ``text.format.schema``)."""
    backend, server = proxy
    body = {"model": "m", **body}
    if isinstance(body["input"], list):
        body["input"] = [{"role": "user", "content": i} if isinstance(i, str) else i for i in body["input"]]
    response = httpx.post(server.url + "/v1/responses", json=body, timeout=30)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param, error
    assert backend.bodies() == []


@pytest.mark.parametrize("where", ["metadata", "tools", "input"])
def test_anything_echoed_or_stored_nested_too_deeply_is_a_400(proxy, where: str) -> None:
    """What the response echoes (metadata, tools) and stores (input items) is encoded as JSON, to 255
    levels: a request nesting deeper is refused before generating, naming the field."""
    backend, server = proxy
    body: dict[str, Any] = {"model": "m", "input": [{"role": "user", "content": "x"}]}
    if where == "metadata":
        body["metadata"] = {"a": "__DEEP__"}
    elif where == "tools":
        body["tools"] = [{**TOOLS[0], "x-extra": "__DEEP__"}]
    else:
        body["input"][0]["x-extra"] = "__DEEP__"
    for stream in (False, True):
        data = json.dumps({**body, "stream": stream}).replace('"__DEEP__"', "[" * 300 + "]" * 300)
        response = httpx.post(server.url + "/v1/responses", content=data, headers={"content-type": "application/json"},
                              timeout=30)
        assert response.status_code == 400, response.text
        assert response.json()["error"]["message"].startswith(where) and "nested too deeply" in response.text
    assert backend.bodies() == []


def test_input_nested_too_deeply_is_answered_where_nothing_stores_it(proxy) -> None:
    """With ``store: false`` and no conversation the input is never encoded (the response object does
    not echo it): its depth is no reason to refuse — and no turn pays for encoding it."""
    backend, server = proxy
    body = {"model": "m", "store": False, "input": [{"role": "user", "content": "x", "x-extra": "__DEEP__"}]}
    data = json.dumps(body).replace('"__DEEP__"', "[" * 300 + "]" * 300)
    response = httpx.post(server.url + "/v1/responses", content=data, headers={"content-type": "application/json"},
                          timeout=30)
    assert response.status_code == 200, response.text
    assert response.json()["store"] is False and len(backend.bodies()) == 1


@pytest.mark.parametrize("kind", ["web_search\r\nX-Injected: 1", "web_search\u0100", "web_search" + "x" * 3_000_000,
                                  "web_search_preview_2031_01_01", "computer_use_preview\n"])
def test_hosted_tools_are_echoed_by_known_name_only(proxy, kind: str) -> None:
    """The warning header names the hosted tool as toolwire knows it — never the client's string (a
    CR/LF split the response, a non-latin-1 character gave a 500, a 3 MB type a 3 MB header)."""
    backend, server = proxy
    backend.script(Script(pieces=["ok"]))
    raw = client_for(server).responses.with_raw_response.create(model="m", input="x", tools=[{"type": kind}])  # type: ignore[list-item,misc]
    family = "computer_use" if kind.startswith("computer_use") else "web_search"
    assert raw.headers["x-toolwire-warning"] == f"hosted tools not available, left out: {family}"
    assert "x-injected" not in raw.headers
    assert raw.parse().output_text == "ok"


def test_hosted_tool_items_are_stored_as_stubs(proxy) -> None:
    """A hosted tool's call item handed back in input is skipped (toolwire ran none) and stored as
    its id, type and status only: its payload reached no prompt, and no continuation reloads it."""
    backend, server = proxy
    client = client_for(server)
    search = {"type": "web_search_call", "id": "ws_1", "status": "completed",
              "action": {"type": "search", "query": "junk " * 50_000}}
    backend.script(Script(pieces=["ok"]))
    first = client.responses.create(model="m", input=[search, {"role": "user", "content": "hi"}])  # type: ignore[list-item]
    assert "junk" not in backend.bodies()[-1]["prompt"]
    listed = httpx.get(server.url + f"/v1/responses/{first.id}/input_items?order=asc", timeout=30).json()["data"]
    assert listed[0] == {"id": "ws_1", "type": "web_search_call", "status": "completed"}
    record = asyncio.run(_stored(server, first.id))
    assert record is not None and len(record.encode()) < 2_000
    backend.script(Script(pieces=["again"]))
    assert client.responses.create(model="m", input="more", previous_response_id=first.id).output_text == "again"


async def _stored(server: ProxyServer, response_id: str) -> Any:
    from app.tenancy import SINGLE

    return await server.runtime.services.stores.responses.get(response_id, SINGLE)


def test_a_stored_response_is_bounded_in_bytes(backend_factory, proxy_factory) -> None:
    """--max-stored-response-bytes: input alone over it is refused before generating (413 naming
    it; store: false is not refused); output taking it over is answered but not stored — a
    warning on a whole answer, error + response.failed ending a stream."""
    backend = backend_factory("vllm", model="Qwen/Qwen3-8B")
    server = proxy_factory(backend=backend.url, chat_template=str(QWEN3_TEMPLATE), tool_call_parser="qwen25",
                           max_stored_response_bytes=1 << 16)
    client = client_for(server)
    with pytest.raises(openai.APIStatusError) as refused:
        client.responses.create(model="m", input="x" * 70_000)
    assert refused.value.status_code == 413 and "--max-stored-response-bytes" in refused.value.message
    assert refused.value.code == "stored_response_too_large" and backend.bodies() == []
    backend.script(Script(pieces=["fine"]))
    assert client.responses.create(model="m", input="x" * 70_000, store=False).output_text == "fine"
    long = ["y" * 10_000] * 7
    backend.script(Script(pieces=long))
    raw = client.responses.with_raw_response.create(model="m", input="write a lot")
    answer = raw.parse()
    assert answer.output_text == "".join(long) and answer.store is False
    assert "--max-stored-response-bytes" in raw.headers["x-toolwire-warning"]
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(answer.id)
    backend.script(Script(pieces=long))
    events = stream_raw(server, {"model": "m", "input": "write a lot"})
    assert [e["type"] for e in events[-2:]] == ["error", "response.failed"]
    assert events[-2]["code"] == "stored_response_too_large"
    assert events[-1]["response"]["output"][0]["content"][0]["text"] == "".join(long)


def test_a_continuation_decodes_a_bounded_number_of_items(backend_factory, proxy_factory, tmp_path) -> None:
    """--max-chain-items: a chain holding more items than one continuation may decode is a 400 naming
    it, and /health keeps answering while the continuation is refused. The chain is built by a
    replica with a larger bound, sharing the store."""
    backend = backend_factory("vllm", model="Qwen/Qwen3-8B")
    common = {"backend": backend.url, "chat_template": str(QWEN3_TEMPLATE), "state_dir": str(tmp_path)}
    builder = proxy_factory(**common, max_chain_items=10**6)
    items = [{"type": "web_search_call", "id": f"ws_{i}", "status": "completed"} for i in range(9_000)]
    previous = None
    for _ in range(4):
        backend.script(Script(pieces=["ok"]))
        body: dict[str, Any] = {"model": "m", "input": [*items, {"role": "user", "content": "hi"}]}
        if previous:
            body["previous_response_id"] = previous
        built = httpx.post(builder.url + "/v1/responses", json=body, timeout=60)
        assert built.status_code == 200, built.text
        previous = built.json()["id"]
    server = proxy_factory(**common)  # the default bound: 10 000 items
    answer: dict[str, httpx.Response] = {}
    continuing = threading.Thread(target=lambda: answer.update(r=httpx.post(
        server.url + "/v1/responses", json={"model": "m", "input": "next", "previous_response_id": previous},
        timeout=60)))
    continuing.start()
    health = []
    while continuing.is_alive() or not health:
        health.append(httpx.get(server.url + "/health", timeout=60).status_code)
    continuing.join()
    assert set(health) == {200}
    response = answer["r"]
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "previous_response_chain_too_large" and "--max-chain-items" in error["message"]


def test_backend_failure_mid_stream_ends_with_failed(proxy) -> None:
    backend, server = proxy
    backend.script(Script(pieces=["Hello", " world", "!"], fault="drop", fault_after=2, delay=0.01))
    events = stream_raw(server, {"model": "m", "input": "x"})
    for event in events:
        EVENT.validate_python(event)
    assert [e["type"] for e in events[-2:]] == ["error", "response.failed"]
    assert events[-1]["response"]["status"] == "failed"


@pytest.fixture(scope="module")
def redis() -> Iterator[RedisServer]:
    server = RedisServer()
    yield server
    server.stop()


def test_two_replicas_share_a_redis_store(redis: RedisServer, backend_factory, proxy_factory) -> None:
    backend = backend_factory("vllm", model="Qwen/Qwen3-8B")
    one, two = (proxy_factory(backend=backend.url, chat_template=str(QWEN3_TEMPLATE), tool_call_parser="qwen25",
                              response_store=redis.url) for _ in range(2))
    backend.script(Script(pieces=REASONING_TEXT_CALLS[6:9]))
    first = client_for(one).responses.create(model="m", input="Weather in Lyon?", tools=TOOLS)
    call = first.output[-1]
    backend.script(Script(pieces=["Sunny in Lyon."]))
    second = client_for(two).responses.create(model="m", previous_response_id=first.id, tools=TOOLS, input=[
        {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}])  # type: ignore[union-attr]
    assert second.output_text == "Sunny in Lyon."
    assert "Weather in Lyon?" in backend.bodies()[-1]["prompt"]
    assert client_for(one).responses.retrieve(second.id).output_text == "Sunny in Lyon."


BAD_NUMBERS = [" 3 ", "+2", "1_0", "٣", "³", "-1", "", "3.0", "1e3", "0x10", "9" * 30]


def test_the_stored_response_routes_read_their_query_strictly(qwen3_vllm) -> None:
    """A query value that is not exactly a valid one is a 400 naming the parameter — never read as
    something else (``stream=yes`` streamed; ``1_0`` was 10, ``٣`` was 3)."""
    backend, proxy = qwen3_vllm
    backend.script(Script(pieces=["Kept."]))
    kept = client_for(proxy).responses.create(model="m", input="hi")
    url = f"{proxy.url}/v1/responses/{kept.id}"

    def refused(path: str, param: str) -> None:
        answer = httpx.get(path, timeout=30)
        assert answer.status_code == 400, (path, answer.text)
        assert answer.json()["error"]["param"] == param, (path, answer.json())

    for value in ("yes", "no", "", "True", "on", " true"):
        refused(f"{url}?stream={value}", "stream")
        refused(f"{url}?include_obfuscation={value}", "include_obfuscation")
    for value in BAD_NUMBERS:
        refused(f"{url}?stream=true&starting_after={value}", "starting_after")
        refused(f"{url}/input_items?limit={value}", "limit")
    refused(f"{url}?stream=false&stream=true", "stream")
    refused(f"{url}/input_items?limit=0", "limit")
    refused(f"{url}/input_items?limit=101", "limit")
    refused(f"{url}/input_items?order=ASC", "order")
    refused(f"{url}/input_items?after=", "after")
    # the valid spellings
    for value in ("false", "0"):
        answer = httpx.get(f"{url}?stream={value}&include_obfuscation=false", timeout=30)
        assert answer.status_code == 200 and answer.json()["id"] == kept.id
    not_background = httpx.get(f"{url}?stream=true&starting_after=3", timeout=30)  # read, then refused for what it is
    assert not_background.status_code == 400 and "background" in not_background.json()["error"]["message"]
    page = httpx.get(f"{url}/input_items?limit=100&order=asc", timeout=30)
    assert page.status_code == 200 and page.json()["data"][0]["content"][0]["text"] == "hi"


def test_the_conversation_item_listing_reads_its_query_strictly(qwen3_vllm) -> None:
    _, proxy = qwen3_vllm
    conversation = client_for(proxy).conversations.create(items=[{"role": "user", "content": "kept"}])
    url = f"{proxy.url}/v1/conversations/{conversation.id}/items"
    for value in BAD_NUMBERS:
        answer = httpx.get(f"{url}?limit={value}", timeout=30)
        assert answer.status_code == 400 and answer.json()["error"]["param"] == "limit", (value, answer.text)
    for bad in ("order=Desc", "after=", "limit=2&limit=3"):
        answer = httpx.get(f"{url}?{bad}", timeout=30)
        assert answer.status_code == 400 and answer.json()["error"]["param"] == bad.split("=")[0], (bad, answer.text)
    assert len(httpx.get(f"{url}?limit=1&order=asc", timeout=30).json()["data"]) == 1
