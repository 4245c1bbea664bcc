"""Chat Completions fields (issue #13, item 3): what is accepted does something or is documented as
harmless; unsupported shapes get a 400 in words, naming the field; ``GET /v1/models/{id}``.
"""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

from tests.conftest import QWEN3_TEMPLATE, client_for
from tests.scripted_backend import Script

MESSAGES = [{"role": "user", "content": "hi"}]


def post(proxy: Any, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(proxy.url + "/v1/chat/completions", json={"model": "m", "messages": MESSAGES, **body}, timeout=30)


@pytest.mark.parametrize(("body", "param", "words"), [
    ({"tool_choice": {"type": "allowed_tools", "allowed_tools": {"mode": "auto", "tools": []}}}, "tool_choice",
     "allowed_tools"),
    ({"tool_choice": {"type": "custom", "custom": {"name": "x"}}}, "tool_choice", "'custom' is not supported"),
    ({"tool_choice": "sometimes"}, "tool_choice", "send 'none', 'auto', 'required'"),
    ({"tools": [{"type": "custom", "custom": {"name": "x"}}]}, "tools", "takes 'function' tools only"),
    ({"tools": [{"type": "function", "function": {"name": "f"}}, {"type": "web_search"}]}, "tools", "tools[1].type"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "http://x/a.png"}}]}]},
     "messages.0.content.0.image_url.url", "no --media-domains"),
    ({"messages": [{"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "", "format": "wav"}}]}]},
     "messages.0.content.0", "'input_audio' is not supported"),
    ({"modalities": ["text", "audio"]}, None, "audio output"),
    ({"web_search_options": {}}, None, "web_search_options"),
    ({"logit_bias": {"hello": 5}}, "logit_bias", "token ids"),
    ({"logit_bias": {"42": 500}}, "logit_bias", "[-100, 100]"),
])
def test_unsupported_shapes_are_400s_in_words(qwen3_vllm, body: dict[str, Any], param: str | None, words: str) -> None:
    _, proxy = qwen3_vllm
    response = post(proxy, body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert words in error["message"] and error["type"] == "invalid_request_error"
    assert error["param"] == param
    assert "Input should be" not in error["message"] and "literal[" not in error["message"]  # no pydantic internals


@pytest.mark.parametrize("kind", ["vllm", "llamacpp"])
def test_logit_bias_and_seed_reach_the_backend(kind: str, backend_factory, proxy_factory) -> None:
    backend = backend_factory(kind, model="Qwen/Qwen3-8B")
    proxy = proxy_factory(backend=backend.url, chat_template=str(QWEN3_TEMPLATE))
    backend.script(Script(pieces=["ok"]))
    response = post(proxy, {"logit_bias": {"42": -100, "7": 2.5}, "seed": 11, "user": "u-1", "metadata": {"k": "v"},
                            "service_tier": "auto", "store": False, "prediction": {"type": "content", "content": "ok"}})
    assert response.status_code == 200, response.text
    sent = backend.bodies()[-1]
    assert sent["seed"] == 11
    if kind == "vllm":
        assert sent["logit_bias"] == {"42": -100, "7": 2.5}
    else:
        assert sorted(sent["logit_bias"]) == [[7, 2.5], [42, -100]]
    assert not {"user", "metadata", "service_tier", "store", "prediction"} & sent.keys()  # accepted, not forwarded


def test_models_by_id(qwen3_vllm) -> None:
    _, proxy = qwen3_vllm
    client = client_for(proxy)
    served = client.models.list().data[0].id
    assert client.models.retrieve(served).id == served
    with pytest.raises(openai.NotFoundError) as caught:
        client.models.retrieve("no-such-model")
    assert "no-such-model" in str(caught.value) and caught.value.response.json()["error"]["code"] == "model_not_found"
