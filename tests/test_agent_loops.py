"""Agent loops over HTTP on every chat template: a call-only assistant turn handed back the way the
``openai`` SDK serialises it (``content: null``), the tool result, the next request — and system /
developer text, which must reach the prompt or be refused with a clear 400.

Each template gets its own proxy (``--reasoning-parser auto --tool-call-parser auto``) in front of
one scripted vLLM backend. Turn 1 forces a call (``tool_choice: required``: vLLM is asked for a JSON
array of calls, whatever the template); the SDK's own message object goes back into the history.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import TEMPLATES, client_for
from tests.proxy_server import ProxyServer
from tests.scripted_backend import Script, ScriptedBackend

ALL_TEMPLATES = sorted(p.name for p in Path(TEMPLATES).glob("*.jinja"))
CITY = "Reykjavik-4471"  # in the call's arguments only: found in the prompt only if the call is rendered
RESULT = "RESULT-sunny-9935"
DEVELOPER = "DEV-NOTE-5521: answer in one short sentence."
TOOLS: list[dict[str, Any]] = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


@pytest.fixture(scope="module")
def backend() -> Iterator[ScriptedBackend]:
    server = ScriptedBackend("vllm", model="scripted").start()
    yield server
    server.stop()


@pytest.fixture(scope="module", params=ALL_TEMPLATES)
def proxy(request: pytest.FixtureRequest, backend: ScriptedBackend) -> Iterator[ProxyServer]:
    """One proxy per template (pytest groups the tests by template, so each starts once)."""
    server = ProxyServer(backend=backend.url, chat_template=str(TEMPLATES / request.param),
                         reasoning_parser="auto", tool_call_parser="auto").start()
    yield server
    server.stop()


def test_call_only_turn_round_trip(proxy: ProxyServer, backend: ScriptedBackend) -> None:
    client = client_for(proxy)
    messages: list[Any] = [{"role": "user", "content": "What is the weather like today?"}]
    backend.script(Script(pieces=[json.dumps([{"name": "get_weather", "arguments": {"city": CITY}}])]))
    first = client.chat.completions.create(model="m", messages=messages, tools=TOOLS, tool_choice="required")
    message = first.choices[0].message
    assert message.content is None and message.tool_calls and message.tool_calls[0].function.name == "get_weather"
    messages.append(message)  # the SDK's own object: serialised with "content": null
    messages.append({"role": "tool", "tool_call_id": message.tool_calls[0].id, "content": RESULT})
    backend.script(Script(pieces=["It is sunny."]))
    second = client.chat.completions.create(model="m", messages=messages, tools=TOOLS)
    answer = second.choices[0].message
    # a model that reasons first (Apriel, R1 distills …) has its plain answer read as reasoning
    assert "It is sunny." in (answer.content or getattr(answer, "reasoning_content", None) or "")
    prompt = backend.bodies()[-1]["prompt"]
    assert CITY in prompt, "the assistant's call is not in the prompt"
    assert RESULT in prompt, "the tool result is not in the prompt"
    assert prompt.index(CITY) < prompt.index(RESULT)


def test_developer_text_reaches_the_prompt(proxy: ProxyServer, backend: ScriptedBackend) -> None:
    conversations = {
        "leading": [{"role": "developer", "content": DEVELOPER}, {"role": "user", "content": "Hi there"}],
        "mid-conversation": [{"role": "user", "content": "Hi there"}, {"role": "assistant", "content": "Hello!"},
                             {"role": "developer", "content": DEVELOPER}, {"role": "user", "content": "And now?"}],
        "system and developer": [{"role": "system", "content": "SYS-NOTE-1187"},
                                 {"role": "developer", "content": DEVELOPER}, {"role": "user", "content": "Hi"}],
    }
    for label, messages in conversations.items():
        backend.script(Script(pieces=["ok"]))
        response = httpx.post(proxy.url + "/v1/chat/completions", json={"model": "m", "messages": messages},
                              timeout=30)
        if response.status_code == 400:  # allowed only with a message that says why
            assert "system" in response.json()["error"]["message"], (label, response.text)
            continue
        assert response.status_code == 200, (label, response.text)
        prompt = backend.bodies()[-1]["prompt"]
        for text in (DEVELOPER, *(m["content"] for m in messages if m["role"] == "system")):
            assert text in prompt, (label, text)


@pytest.mark.parametrize(("template", "parser", "output", "model_id", "in_prompt"), [
    ("Kimi-K2-Instruct.jinja", "kimi_k2",
     ('<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>'
      f'{{"city": "{CITY}"}}<|tool_call_end|><|tool_calls_section_end|>'),
     "functions.get_weather:0", "<|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>"),
    ("Mistral-Small-3.2-24B-Instruct-2506.jinja", "mistral",
     f'[TOOL_CALLS]get_weather[CALL_ID]a1B2c3D4e[ARGS]{{"city": "{CITY}"}}',
     "a1B2c3D4e", "[CALL_ID]a1B2c3D4e[ARGS]"),
])
def test_model_written_ids_round_trip(template: str, parser: str, output: str, model_id: str, in_prompt: str,
                                      backend: ScriptedBackend) -> None:
    proxy = ProxyServer(backend=backend.url, chat_template=str(TEMPLATES / template), tool_call_parser=parser).start()
    try:
        client = client_for(proxy)
        messages: list[Any] = [{"role": "user", "content": "Weather?"}]
        backend.script(Script(pieces=[output]))
        message = client.chat.completions.create(model="m", messages=messages, tools=TOOLS).choices[0].message
        assert message.tool_calls and message.tool_calls[0].id == model_id
        messages += [message, {"role": "tool", "tool_call_id": model_id, "content": RESULT}]
        backend.script(Script(pieces=["Sunny."]))
        client.chat.completions.create(model="m", messages=messages, tools=TOOLS)
        prompt = backend.bodies()[-1]["prompt"]
        assert in_prompt in prompt and RESULT in prompt
    finally:
        proxy.stop()
