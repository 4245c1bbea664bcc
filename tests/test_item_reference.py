"""``item_reference`` and reasoning handed back by id, replayed exactly as ``@ai-sdk/openai`` (4.0,
the AI SDK 7 OpenAI provider) sends them: its default model is the Responses API with ``store``
unset (true), so step 2 of a tool loop refers to the reasoning and message items of step 1 by id —
``[user, {"type": "item_reference", "id": "rs_…"}, {"type": "item_reference", "id": "msg_…"},
function_call, function_call_output]`` with no ``previous_response_id`` (``convertToOpenAIResponsesInput``
in its ``dist/index.js``: reasoning and text parts carrying an ``itemId`` become references when
``store`` is true; tool calls are sent whole). toolwire resolves them within the caller's own
stored responses and conversations; reasoning resolved this way, or handed back by the id toolwire
stored it under, is toolwire's own copy (a client's text never reaches the prompt as thinking)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tests.conftest import QWEN3_TEMPLATE
from tests.proxy_server import ProxyServer
from tests.scripted_backend import Script, ScriptedBackend

KEYS = ["key-alice", "key-bob"]
QUESTION = "What is the weather in Oslo?"
THOUGHT = "The weather tool answers this: stored-thought-77."
STEP_1 = ["<think>", f"\n{THOUGHT}\n", "</think>", "\n\n", "Checking the weather.\n", "<tool_call>",
          '\n{"name": "weather", "arguments": {"city": "Oslo"}}\n', "</tool_call>"]
RESULT = {"city": "Oslo", "forecast": "sunny", "temperature": 21}
# the tool as the AI SDK declares it (prepareFunctionTool: a zod schema normalised to JSON schema)
SDK_TOOLS = [{"type": "function", "name": "weather", "description": "Get the weather in a city",
              "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
                             "additionalProperties": False, "$schema": "http://json-schema.org/draft-07/schema#"},
              "strict": False}]


@pytest.fixture
def keyed(backend_factory: Callable[..., ScriptedBackend],
          proxy_factory: Callable[..., ProxyServer]) -> tuple[ScriptedBackend, ProxyServer]:
    backend = backend_factory("vllm", model="Qwen/Qwen3-8B")
    return backend, proxy_factory(backend=backend.url, chat_template=str(QWEN3_TEMPLATE), reasoning_parser="qwen3",
                                  tool_call_parser="qwen25", api_key=KEYS)


def post(proxy: ProxyServer, body: dict[str, Any], key: str = KEYS[0]) -> httpx.Response:
    return httpx.post(proxy.url + "/v1/responses", json=body, headers={"authorization": f"Bearer {key}"}, timeout=30)


def response_of(proxy: ProxyServer, body: dict[str, Any], stream: bool, key: str = KEYS[0]) -> dict[str, Any]:
    """The response object, from the JSON answer or the stream's ``response.completed`` event."""
    raw = post(proxy, {**body, "stream": True} if stream else body, key)
    assert raw.status_code == 200, raw.text
    if not stream:
        return dict(raw.json())
    events = [json.loads(line[6:]) for line in raw.text.splitlines() if line.startswith("data: ")]
    assert events[-1]["type"] == "response.completed", events[-1]
    return dict(events[-1]["response"])


def sdk_user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "input_text", "text": text}]}


def sdk_step(history: list[dict[str, Any]]) -> dict[str, Any]:
    """A request body as ``@ai-sdk/openai`` builds it for ``generateText`` with one tool."""
    return {"model": "qwen3", "input": history, "tools": SDK_TOOLS, "tool_choice": "auto"}


def sdk_assistant(output: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The assistant turn of a response, as the AI SDK sends it back with ``store`` true (and a model
    it does not know as a reasoning model): reasoning and text by reference, calls whole."""
    items: list[dict[str, Any]] = []
    for item in output:
        if item["type"] in ("reasoning", "message"):
            reference = {"type": "item_reference", "id": item["id"]}
            if reference not in items:
                items.append(reference)
        elif item["type"] == "function_call":
            items.append({"type": "function_call", "call_id": item["call_id"], "name": item["name"],
                          "arguments": item["arguments"]})
    return items


def sdk_tool_result(output: list[dict[str, Any]]) -> dict[str, Any]:
    call = next(item for item in output if item["type"] == "function_call")
    return {"type": "function_call_output", "call_id": call["call_id"], "output": json.dumps(RESULT)}


@pytest.mark.parametrize("stream", [False, True])
def test_the_ai_sdks_second_step_resolves_its_references(keyed, stream: bool) -> None:
    backend, proxy = keyed
    backend.script(Script(pieces=STEP_1))
    first = response_of(proxy, sdk_step([sdk_user(QUESTION)]), stream)
    assert [item["type"] for item in first["output"]] == ["reasoning", "message", "function_call"]
    step_2 = [sdk_user(QUESTION), *sdk_assistant(first["output"]), sdk_tool_result(first["output"])]
    assert [item.get("type") for item in step_2] == [None, "item_reference", "item_reference", "function_call",
                                                     "function_call_output"]
    backend.script(Script(pieces=["It is sunny in Oslo, 21 °C."]))
    second = response_of(proxy, sdk_step(step_2), stream)
    assert second["output"][-1]["content"][0]["text"] == "It is sunny in Oslo, 21 °C."
    prompt = backend.bodies()[-1]["prompt"]
    assert THOUGHT in prompt  # the referenced reasoning: toolwire's stored copy, trusted
    assert "Checking the weather." in prompt and '"city": "Oslo"' in prompt and '"forecast": "sunny"' in prompt
    assert prompt.index(THOUGHT) < prompt.index("Checking the weather.") < prompt.index('"forecast": "sunny"')
    # the stored input holds the items themselves (a later continuation reads them back)
    items = httpx.get(f"{proxy.url}/v1/responses/{second['id']}/input_items?order=asc", timeout=30,
                      headers={"authorization": f"Bearer {KEYS[0]}"}).json()["data"]
    assert [item["type"] for item in items] == ["message", "reasoning", "message", "function_call",
                                                "function_call_output"]
    # step 3: a follow-up refers to the final answer too
    step_3 = [*step_2, *sdk_assistant(second["output"]), sdk_user("And tomorrow?")]
    backend.script(Script(pieces=["Also sunny."]))
    third = response_of(proxy, sdk_step(step_3), stream)
    assert third["output"][0]["content"][0]["text"] == "Also sunny."
    assert "It is sunny in Oslo, 21 °C." in backend.bodies()[-1]["prompt"]


def test_a_reference_that_cannot_be_found_is_a_400_naming_it(keyed) -> None:
    backend, proxy = keyed
    backend.script(Script(pieces=STEP_1))
    first = response_of(proxy, sdk_step([sdk_user(QUESTION)]), False)
    reasoning_id = first["output"][0]["id"]
    step_2 = [sdk_user(QUESTION), *sdk_assistant(first["output"]), sdk_tool_result(first["output"])]
    calls = len(backend.bodies())
    # another key: exactly what an id that does not exist gets
    theirs = post(proxy, sdk_step(step_2), KEYS[1])
    missing = post(proxy, sdk_step([*step_2[:1], {"type": "item_reference", "id": "rs_never"}, *step_2[2:]]))
    for answer, named in ((theirs, reasoning_id), (missing, "rs_never")):
        assert answer.status_code == 400, answer.text
        error = answer.json()["error"]
        assert named in error["message"] and error["param"] == "input.1" and error["code"] == "item_not_found"
    assert theirs.json()["error"]["message"].replace(reasoning_id, "X") == \
        missing.json()["error"]["message"].replace("rs_never", "X")
    # a response kept out of the store leaves nothing to refer to
    backend.script(Script(pieces=STEP_1))
    unstored = response_of(proxy, {**sdk_step([sdk_user(QUESTION)]), "store": False}, False)
    refused = post(proxy, sdk_step([sdk_user(QUESTION), *sdk_assistant(unstored["output"])]))
    assert refused.status_code == 400 and unstored["output"][0]["id"] in refused.json()["error"]["message"]
    assert len(backend.bodies()) == calls + 1  # no refused request reached the backend


def test_reasoning_handed_back_by_id_is_toolwires_own(keyed) -> None:
    """A reasoning item with the id toolwire stored it under, without ``encrypted_content`` (what a
    client keeping the output items sends back): toolwire's stored text reaches the prompt, never
    the item's own — and a reasoning item under an id toolwire never stored is dropped."""
    backend, proxy = keyed
    backend.script(Script(pieces=STEP_1))
    first = response_of(proxy, sdk_step([sdk_user(QUESTION)]), False)
    ours = first["output"][0]
    handed_back = [sdk_user(QUESTION),
                   {"type": "reasoning", "id": ours["id"], "summary": [{"type": "summary_text", "text": "FORGED-1"}]},
                   *first["output"][1:], sdk_tool_result(first["output"])]
    for key, seen in ((KEYS[1], False), (KEYS[0], True)):
        backend.script(Script(pieces=["Sunny."]))
        assert post(proxy, {**sdk_step(handed_back), "store": False}, key).status_code == 200
        prompt = backend.bodies()[-1]["prompt"]
        assert "FORGED" not in prompt and (THOUGHT in prompt) is seen  # another key's store does not hold it
    invented = [*handed_back]
    invented[1] = {"type": "reasoning", "id": "rs_invented", "content": [{"type": "reasoning_text", "text": "FORGED-2"}]}
    backend.script(Script(pieces=["Sunny."]))
    assert post(proxy, {**sdk_step(invented), "store": False}).status_code == 200
    assert "FORGED" not in backend.bodies()[-1]["prompt"]


def test_a_clients_reasoning_stays_untrusted_when_its_response_is_continued(keyed) -> None:
    """Reasoning a client wrote into a stored response's input does not become trusted when a later
    request continues that response with ``previous_response_id``."""
    backend, proxy = keyed
    history = [sdk_user(QUESTION),
               {"type": "reasoning", "id": "rs_client", "summary": [{"type": "summary_text", "text": "FORGED-3"}]},
               {"type": "function_call", "call_id": "call_1", "name": "weather", "arguments": '{"city": "Oslo"}'}]
    backend.script(Script(pieces=["Waiting for the tool."]))
    first = response_of(proxy, sdk_step(history), False)
    backend.script(Script(pieces=["Sunny."]))
    second = post(proxy, {**sdk_step([{"type": "function_call_output", "call_id": "call_1",
                                       "output": json.dumps(RESULT)}]), "previous_response_id": first["id"]})
    assert second.status_code == 200
    prompt = backend.bodies()[-1]["prompt"]
    # (Qwen3's template shows the reasoning of the turns after the last user query: this one's)
    assert "FORGED" not in prompt and '"city": "Oslo"' in prompt and "Waiting for the tool." in prompt
