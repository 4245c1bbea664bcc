"""The vLLM dialect (``app.backends.vllm``), fed event sequences shaped as vLLM streams them
(``continuous_usage_stats``: a usage object in every chunk; ``n`` choices interleaved by ``index``;
``stop_reason`` naming the matched stop string; the usage of all choices last, then ``[DONE]``)."""

from __future__ import annotations

from typing import Any

import pytest

from app.backends.base import token_count, tokenizer_body
from app.backends.generation import GenerationRequest, Sampling
from app.backends.vllm import Vllm
from app.constraints.tools import ConstraintRequest, ReasoningGate
from app.errors import BackendError
from app.settings import Settings
from tests.app.backends.events import run, text_of


def chunk(text: str, index: int = 0, finish: str | None = None, stop_reason: Any = None, done: int = 1) -> dict:
    return {"id": "cmpl-v", "object": "text_completion", "created": 0, "model": "Qwen/Qwen3-8B",
            "choices": [{"index": index, "text": text, "logprobs": None, "finish_reason": finish,
                         "stop_reason": stop_reason}],
            "usage": {"prompt_tokens": 12, "completion_tokens": done, "total_tokens": 12 + done}}


def tail(completion: int) -> list[dict | None]:
    return [{"id": "cmpl-v", "object": "text_completion", "created": 0, "model": "Qwen/Qwen3-8B", "choices": [],
             "usage": {"prompt_tokens": 12, "completion_tokens": completion, "total_tokens": 12 + completion}}, None]


def test_one_answer_with_continuous_usage() -> None:
    deltas, (finish,) = run(Vllm().decoder(GenerationRequest("p")),
                            [chunk("<think>", done=1)], [chunk("hi", done=2), chunk("</think>", done=3)],
                            [chunk("", finish="stop", stop_reason=151645, done=3), *tail(3)])
    assert [(d.text, d.tokens, d.prompt_tokens) for d in deltas] == [("<think>", 1, 12), ("hi</think>", 2, None)]
    assert finish.reason == "stop" and finish.stop_sequence is None  # a token id, not a stop string
    assert finish.usage is not None and (finish.usage.prompt_tokens, finish.usage.completion_tokens) == (12, 3)


def test_n_choices_interleaved_by_index_each_finish_with_its_own_usage() -> None:
    decoder = Vllm().decoder(GenerationRequest("p", n=2))
    deltas, finishes = run(decoder,
                           [chunk("a", 0, done=1), chunk("x", 1, done=2)],
                           [chunk("b", 0, done=3), chunk("", 0, finish="stop", stop_reason="STOP", done=3),
                            chunk("y", 1, done=4)],
                           [chunk("", 1, finish="length", done=4), *tail(4)])
    assert text_of(deltas, 0) == "ab" and text_of(deltas, 1) == "xy"
    assert [d.prompt_tokens for d in deltas if d.index == 0] == [12, None]  # told once per choice
    assert [d.prompt_tokens for d in deltas if d.index == 1] == [12, None]
    assert [(f.index, f.reason, f.stop_sequence) for f in finishes] == [(0, "stop", "STOP"), (1, "length", None)]
    assert [f.usage.completion_tokens for f in finishes if f.usage] == [3, 4]  # the usage seen beside each choice


def test_a_choice_that_never_finished_fails_the_stream() -> None:
    decoder = Vllm().decoder(GenerationRequest("p", n=2))
    decoder.decode([chunk("a", 0), chunk("", 0, finish="stop"), chunk("x", 1), None])
    assert decoder.stop
    with pytest.raises(BackendError, match="without a finish reason"):
        decoder.end()


@pytest.mark.parametrize("index", [2, -1, "0", True, None])
def test_a_choice_index_outside_the_answers_is_a_502(index: Any) -> None:
    decoder = Vllm().decoder(GenerationRequest("p", n=2))
    with pytest.raises(BackendError) as caught:
        decoder.decode([chunk("a", index)])
    assert caught.value.kind == "bad_shape" and "index" in caught.value.message


def test_body_keeps_special_tokens_and_asks_for_usage_in_every_chunk() -> None:
    gate = ReasoningGate("<think>", "</think>", True)
    sampling = Sampling(max_tokens=5, top_k=20, min_p=0.1, repetition_penalty=1.1)
    body = Vllm().body(GenerationRequest("hi", sampling, reasoning_budget=64, reasoning=gate, n=3), "m")
    assert body["skip_special_tokens"] is False and body["spaces_between_special_tokens"] is False
    assert body["add_special_tokens"] is False and body["n"] == 3
    assert (body["top_k"], body["min_p"], body["repetition_penalty"]) == (20, 0.1, 1.1)
    assert body["thinking_token_budget"] == 64
    assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    plain = Vllm().body(GenerationRequest("hi", reasoning_budget=64), "m")
    assert "thinking_token_budget" not in plain and "n" not in plain and "top_k" not in plain


def test_constraints_in_current_or_legacy_fields_by_the_setting() -> None:
    request = ConstraintRequest.of(None, None, [], None, True, None,
                                   {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}})
    assert Vllm().constrain(request).fields == {"structured_outputs": {"json": {"type": "object"}}}
    legacy = Vllm.configured(Settings(vllm_legacy_guided=True))
    assert legacy.constrain(request).fields == {"guided_json": {"type": "object"}}
    assert Vllm.configured(Settings()) == Vllm()


def test_tokenize_request_and_count() -> None:
    tokenizer = Vllm.tokenizer
    assert tokenizer is not None and tokenizer.path == "/tokenize" and tokenizer.plain is None
    body = tokenizer_body(tokenizer, "hello", "m", tokenizer.counting)
    assert list(body.items()) == [("model", "m"), ("prompt", "hello"), ("add_special_tokens", False)]
    assert tokenizer_body(tokenizer, "hello", None, tokenizer.counting) == {"prompt": "hello", "add_special_tokens": False}
    assert token_count(tokenizer, {"count": 3, "tokens": [1, 2, 3, 4]}) == 3
    assert token_count(tokenizer, {"tokens": [1, 2]}) == 2
    with pytest.raises(BackendError, match="without a count"):
        token_count(tokenizer, {"detail": "nope"})


def test_recognised_by_its_models_owner_and_its_context_from_max_model_len() -> None:
    models = {"object": "list", "data": [{"id": "Qwen/Qwen3-8B", "object": "model", "owned_by": "vllm",
                                          "root": "Qwen/Qwen3-8B", "max_model_len": 40960}]}
    assert Vllm.recognises(models) and Vllm.sniff == "/v1/models"
    assert not Vllm.recognises({"data": [{"id": "x", "owned_by": "llamacpp"}]}) and not Vllm.recognises(None)
    facts = Vllm().facts({"models": models})
    assert (facts.model, facts.context_length) == ("Qwen/Qwen3-8B", 40960)


def test_a_tokenizer_endpoint_not_found_is_not_asked_again_until_the_recheck(monkeypatch: pytest.MonkeyPatch) -> None:
    import asyncio

    import httpx

    from app.backends import base
    from app.errors import APIError
    from tests.scripted_backend import ScriptedBackend

    scripted = ScriptedBackend("vllm", tokenizer=False).start()

    async def go() -> None:
        async with httpx.AsyncClient() as client:
            backend = base.Backend(scripted.url, client, model="m", dialect=Vllm())
            assert backend.counts_tokens
            with pytest.raises(BackendError, match="no tokenizer endpoint") as missing:
                await backend.count_tokens("hello")
            assert (missing.value.status, missing.value.code) == (400, "count_tokens_unsupported")
            assert not backend.counts_tokens
            with pytest.raises(APIError, match="no tokenizer endpoint"):
                await backend.count_tokens("hello")
            assert len(scripted.tokenized) == 1  # not asked again within the window
            monkeypatch.setattr(base, "TOKENIZER_RECHECK_SECONDS", 0.0)  # a window that passes at once
            backend = base.Backend(scripted.url, client, model="m", dialect=Vllm())
            with pytest.raises(BackendError, match="no tokenizer endpoint"):
                await backend.count_tokens("hello")
            scripted.tokenizer = True  # the endpoint is back
            assert backend.counts_tokens and await backend.count_tokens("hello") == 5
            assert len(scripted.tokenized) == 3

    try:
        asyncio.run(go())
    finally:
        scripted.stop()
