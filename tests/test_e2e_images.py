"""End-to-end tier, images: the real llama-server (built from the vendored llama.cpp) on the real
SmolLM2 GGUF — as it is, text-only, and with a tiny projector this suite writes (``tests.tiny_mmproj``:
real vision input, untrained weights) — behind the proxy, through all three faces with their SDKs."""

from __future__ import annotations

import base64
from collections.abc import Iterator

import anthropic
import httpx
import openai
import pytest

from app.local.artifacts import ensure_llama_server, ensure_model
from app.local.llama_server import LlamaServerProcess
from tests.conftest import client_for
from tests.proxy_server import ProxyServer
from tests.test_images import data_url, png
from tests.tiny_mmproj import write_tiny_mmproj

pytestmark = pytest.mark.e2e

SMOLLM2_EMBD = 576  # SmolLM2-135M's embedding width: the projector's output must match it


@pytest.fixture(scope="module")
def text_only() -> Iterator[tuple[LlamaServerProcess, ProxyServer]]:
    server = LlamaServerProcess(ensure_llama_server(), ensure_model(), ctx=2048, threads=2)
    server.start()
    proxy = ProxyServer(backend=server.url).start()
    yield server, proxy
    proxy.stop()
    server.stop()


@pytest.fixture(scope="module")
def vision(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LlamaServerProcess, ProxyServer]]:
    mmproj = write_tiny_mmproj(tmp_path_factory.mktemp("mmproj") / "tiny-mmproj.gguf", SMOLLM2_EMBD)
    server = LlamaServerProcess(ensure_llama_server(), ensure_model(), ctx=2048, threads=2,
                                extra_args=("--mmproj", str(mmproj)))
    server.start()
    proxy = ProxyServer(backend=server.url).start()
    yield server, proxy
    proxy.stop()
    server.stop()


def image_chat() -> list[dict]:
    """Two text parts, an image, a text part: llama-server joins the first two with a newline and
    puts none next to the image — a prompt that differs in any of that differs in tokens."""
    return [{"role": "user", "content": [{"type": "text", "text": "What is in"}, {"type": "text", "text": "this picture?"},
                                         {"type": "image_url", "image_url": {"url": data_url(png())}},
                                         {"type": "text", "text": "Answer briefly."}]}]


def test_text_only_model_is_refused_by_toolwire_before_llama_server_is_asked(text_only) -> None:
    server, proxy = text_only
    props = httpx.get(server.url + "/props", timeout=30).json()
    assert props["modalities"]["vision"] is False
    with pytest.raises(openai.BadRequestError) as caught:
        client_for(proxy).chat.completions.create(model="smollm2", messages=image_chat(), max_tokens=8)
    assert "takes no images" in caught.value.message and "--mmproj" in caught.value.message
    # and llama-server itself refuses the same body shape: its own words for a model without a projector
    marker = props["media_marker"]
    answer = httpx.post(server.url + "/completion", timeout=60, json={"n_predict": 4, "prompt": {
        "prompt_string": f"What is this?{marker}", "multimodal_data": [base64.b64encode(png()).decode()]}})
    assert answer.status_code >= 400 and "multimodal" in answer.text


def test_an_image_through_chat_is_evaluated_by_the_real_server(vision) -> None:
    server, proxy = vision
    props = httpx.get(server.url + "/props", timeout=30).json()
    assert props["modalities"]["vision"] is True and props["media_marker"].startswith("<__media")
    client = client_for(proxy)
    with_image = client.chat.completions.create(model="smollm2", messages=image_chat(), max_tokens=8, temperature=0)
    text_only = client.chat.completions.create(model="smollm2", max_tokens=8, temperature=0, messages=[
        {"role": "user", "content": [{"type": "text", "text": "What is in\nthis picture?Answer briefly."}]}])
    assert with_image.choices[0].finish_reason in ("stop", "length") and with_image.choices[0].message.content
    # the image's tokens (its embeddings, and the projector's begin / end text) were evaluated
    assert with_image.usage.prompt_tokens > text_only.usage.prompt_tokens + 4
    # the template saw the message as llama-server's own chat endpoint gives it: the same prompt
    own = httpx.post(server.url + "/v1/chat/completions", timeout=120, json={
        "messages": image_chat(), "max_tokens": 8, "temperature": 0}).json()
    assert own["usage"]["prompt_tokens"] == with_image.usage.prompt_tokens


def test_an_image_through_responses_and_messages(vision) -> None:
    _, proxy = vision
    response = client_for(proxy).responses.create(model="smollm2", store=False, max_output_tokens=8, input=[
        {"role": "user", "content": [{"type": "input_text", "text": "Describe"},
                                     {"type": "input_image", "image_url": data_url(png()), "detail": "auto"}]}])
    assert response.status == "completed" or response.status == "incomplete"
    assert response.usage is not None and response.usage.input_tokens > 4
    message = anthropic.Anthropic(base_url=proxy.url, api_key="unused", max_retries=0, timeout=120).messages.create(
        model="smollm2", max_tokens=8, messages=[{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                         "data": base64.b64encode(png()).decode()}},
            {"type": "text", "text": "Describe"}]}])
    assert message.stop_reason in ("end_turn", "max_tokens") and message.usage.input_tokens > 4


def test_real_server_marker_is_random_per_process(vision, text_only) -> None:
    markers = {httpx.get(s.url + "/props", timeout=30).json()["media_marker"] for s, _ in (vision, text_only)}
    assert len(markers) == 2  # unguessable: client text cannot hold it by accident
