"""The llama-server dialect (``app.backends.llamacpp``), fed event sequences shaped as
``POST /completion`` streams them: one event per token (``content``, ``tokens``, ``stop: false``,
``tokens_evaluated``), a final event with ``stop: true``, ``stop_type``, ``stopping_word``,
``tokens_predicted`` and ``timings``; no ``[DONE]``."""

from __future__ import annotations

import math
from typing import Any

import pytest

from app.backends.base import token_count, token_ids, tokenizer_body
from app.backends.dialect import PublishedTemplate
from app.backends.generation import GenerationRequest, Sampling
from app.backends.llamacpp import LlamaCpp, token_probabilities
from app.constraints.tools import ReasoningGate
from app.errors import BackendError
from tests.app.backends.events import answer, recorded, run


def token(content: str, i: int = 0, **extra: Any) -> dict:
    return {"index": 0, "content": content, "tokens": [i], "stop": False, "id_slot": 0, "tokens_predicted": i + 1,
            "tokens_evaluated": 21, **extra}


def final(stop_type: str = "eos", word: str = "", predicted: int = 3, cache_n: Any = 4) -> dict:
    return {"index": 0, "content": "", "tokens": [], "id_slot": 0, "stop": True, "model": "smollm2",
            "tokens_predicted": predicted, "tokens_evaluated": 21, "stop_type": stop_type, "stopping_word": word,
            "timings": {"cache_n": cache_n, "prompt_n": 17, "predicted_n": predicted}, "truncated": False}


def test_tokens_then_the_final_event() -> None:
    decoder = LlamaCpp().decoder(GenerationRequest("p"))
    deltas, (finish,) = run(decoder, [token("Hel", 0), token("lo", 1)], [token("!", 2), final()])
    assert [(d.text, d.tokens, d.prompt_tokens) for d in deltas] == [("Hello", 2, 21), ("!", 1, None)]
    assert finish.reason == "stop" and finish.stop_sequence is None and finish.index == 0
    assert finish.usage is not None
    assert (finish.usage.prompt_tokens, finish.usage.completion_tokens, finish.usage.cached_tokens) == (21, 3, 4)
    assert decoder.stop and decoder.complete


def test_the_final_event_stops_reading_even_mid_read() -> None:
    decoder = LlamaCpp().decoder(GenerationRequest("p"))
    deltas = decoder.decode([token("a"), final(), token("never")])
    assert [d.text for d in deltas] == ["a"] and decoder.stop


@pytest.mark.parametrize(("stop_type", "word", "reason", "sequence"), [
    ("limit", "", "length", None), ("word", "END", "stop", "END"), ("eos", "ignored", "stop", None),
    ("word", "", "stop", None)])
def test_stop_types(stop_type: str, word: str, reason: str, sequence: str | None) -> None:
    _, (finish,) = run(LlamaCpp().decoder(GenerationRequest("p")), [token("a"), final(stop_type, word)])
    assert (finish.reason, finish.stop_sequence) == (reason, sequence)


def test_odd_usage_values_count_as_zero_or_unknown() -> None:
    event = {**final(cache_n=True), "tokens_evaluated": -3, "tokens_predicted": "9"}
    _, (finish,) = run(LlamaCpp().decoder(GenerationRequest("p")), [event])
    assert finish.usage is not None
    assert (finish.usage.prompt_tokens, finish.usage.completion_tokens, finish.usage.cached_tokens) == (0, 0, None)


def test_a_stream_that_ends_before_the_final_event_is_a_502() -> None:
    decoder = LlamaCpp().decoder(GenerationRequest("p"))
    decoder.decode([token("a")])
    assert not decoder.complete and not decoder.stop
    with pytest.raises(BackendError, match="before the final event") as caught:
        decoder.end()
    assert caught.value.kind == "dropped"
    decoder = LlamaCpp().decoder(GenerationRequest("p"))
    decoder.decode([token("a"), None])  # a [DONE] llama-server never sends: stop reading, still no finish
    assert decoder.stop and not decoder.complete
    with pytest.raises(BackendError):
        decoder.end()


def test_content_that_is_not_a_string_is_a_502() -> None:
    with pytest.raises(BackendError) as caught:
        LlamaCpp().decoder(GenerationRequest("p")).decode([token("a"), {"content": ["x"], "stop": False}])
    assert caught.value.kind == "bad_shape" and '"content"' in caught.value.message


# ---------------------------------------------------------------------------------------- logprobs

def probs(*entries: tuple[str, float], top: int = 2) -> list[dict]:
    return [{"id": 1, "token": t, "bytes": list(t.encode()), "logprob": v,
             "top_logprobs": [{"id": 1, "token": t, "bytes": list(t.encode()), "logprob": v}]
             + [{"id": 2, "token": f"alt{k}", "bytes": list(f"alt{k}".encode()), "logprob": v - k}
                for k in range(1, top)]} for t, v in entries]


def test_token_probabilities_become_pieces_and_empty_content_carries_its_token_on() -> None:
    decoder = LlamaCpp().decoder(GenerationRequest("p", logprobs=1))
    deltas, _ = run(decoder, [
        token("Hi", 0, completion_probabilities=probs(("Hi", -0.5))),
        token("", 1, completion_probabilities=probs(("<|im_end|>", -0.25))),  # a special token without text
        token("!", 2, completion_probabilities=probs(("!", -0.125))),
    ], [final()])
    (delta,) = deltas
    assert delta.text == "Hi!" and delta.pieces is not None
    assert [(text, [t.token for t in tokens]) for text, tokens in delta.pieces] == [
        ("Hi", ["Hi"]), ("!", ["<|im_end|>", "!"])]
    first = delta.pieces[0][1][0]
    assert (first.logprob, first.bytes, [t.token for t in first.top]) == (-0.5, [72, 105], ["Hi"])


def test_post_sampling_probabilities_are_turned_into_logprobs() -> None:
    (entry,) = token_probabilities([{"id": 1, "token": "a", "prob": 0.5,
                                     "top_probs": [{"id": 1, "token": "a", "prob": 0.5},
                                                   {"id": 2, "token": "b", "prob": 0.0}]}], 2)
    assert entry.logprob == pytest.approx(math.log(0.5)) and entry.bytes == [97]
    assert [(t.token, t.logprob) for t in entry.top] == [("a", pytest.approx(math.log(0.5))), ("b", -9999.0)]


@pytest.mark.parametrize("value", [{"token": "a"}, [{"logprob": -1}], [{"token": 3, "logprob": -1}], ["a"]])
def test_probabilities_of_the_wrong_shape_are_a_502(value: Any) -> None:
    with pytest.raises(BackendError) as caught:
        LlamaCpp().decoder(GenerationRequest("p", logprobs=0)).decode([token("a", completion_probabilities=value)])
    assert caught.value.kind == "bad_shape"


# ------------------------------------------------------------------------------- request and probe

def test_body_in_llama_servers_words() -> None:
    gate = ReasoningGate("<think>", "</think>", False)
    sampling = Sampling(max_tokens=8, repetition_penalty=1.2, logit_bias={5: -1.0}, stop=["x"])
    body = LlamaCpp().body(GenerationRequest("hi", sampling, ("<tool_call>",), {"grammar": "root ::= x"}, 32, gate,
                                             logprobs=0), "ignored")
    assert body == {"prompt": "hi", "stream": True, "n_predict": 8, "stop": ["x"], "repeat_penalty": 1.2,
                    "logit_bias": [[5, -1.0]], "preserved_tokens": ["<tool_call>"], "cache_prompt": True,
                    "n_probs": 1, "reasoning_budget_tokens": 32, "reasoning_budget_start_tag": "<think>",
                    "reasoning_budget_end_tag": "</think>", "reasoning_budget_arm_immediately": False,
                    "grammar": "root ::= x"}
    assert LlamaCpp().body(GenerationRequest("hi"), None)["n_predict"] == -1  # unbounded: until the context ends


PROPS = {"default_generation_settings": {"id": 0, "n_ctx": 4096, "params": {"n_predict": -1}},
         "total_slots": 1, "model_path": "/m/SmolLM2.gguf", "chat_template": "{{ bos_token }}{{ messages }}",
         "bos_token": "<s>", "eos_token": "</s>", "build_info": "b1"}
MODELS = {"object": "list", "data": [{"id": "/m/SmolLM2.gguf", "object": "model", "owned_by": "llamacpp",
                                      "meta": {"n_ctx": 2048, "n_ctx_train": 8192}}]}


def test_facts_from_props_models_and_the_bos_probe() -> None:
    facts = LlamaCpp().facts({"models": MODELS, "props": PROPS, "bos": {"tokens": [1]}})
    assert facts.model == "/m/SmolLM2.gguf" and facts.context_length == 4096 and facts.adds_bos
    assert facts.template == PublishedTemplate("{{ bos_token }}{{ messages }}", "<s>", "</s>")


def test_context_from_models_meta_when_props_do_not_say_and_none_without_either() -> None:
    facts = LlamaCpp().facts({"models": MODELS, "props": {"default_generation_settings": {}}, "bos": {"tokens": []}})
    assert facts.context_length == 2048 and facts.template is None and not facts.adds_bos
    empty = LlamaCpp().facts({"models": None, "props": None, "bos": None})
    assert (empty.model, empty.context_length, empty.template, empty.adds_bos) == (None, None, None, False)
    odd = LlamaCpp().facts({"props": {"default_generation_settings": {"n_ctx": 0}, "chat_template": ""}})
    assert odd.context_length is None and odd.template is None


def test_probes_and_recognition() -> None:
    assert [(p.name, p.path) for p in LlamaCpp.probes] == [("models", "/v1/models"), ("props", "/props"),
                                                           ("bos", "/tokenize")]
    assert LlamaCpp.recognises(PROPS) and not LlamaCpp.recognises({"chat_template": "x"})
    assert not LlamaCpp.recognises(None) and LlamaCpp.sniff == "/props"


def test_tokenize_requests_and_answers() -> None:
    tokenizer = LlamaCpp.tokenizer
    assert tokenizer is not None and tokenizer.path == "/tokenize" and tokenizer.plain is not None
    counting = tokenizer_body(tokenizer, "<|im_start|>hi", "m", tokenizer.counting)
    assert list(counting.items()) == [("content", "<|im_start|>hi"), ("add_special", True), ("parse_special", True)]
    plain = tokenizer_body(tokenizer, "<|im_start|>", None, tokenizer.plain)
    assert list(plain.items()) == [("content", "<|im_start|>"), ("add_special", False), ("parse_special", False)]
    assert tokenizer.special is not None  # which strings are tokens of their own (app.vocab): no BOS either
    special = tokenizer_body(tokenizer, "<|im_start|>", None, tokenizer.special)
    assert list(special.items()) == [("content", "<|im_start|>"), ("add_special", False), ("parse_special", True)]
    mixed = tokenizer_body(tokenizer, ["<s>", 5, "x"], "m", tokenizer.counting)
    assert mixed["content"] == ["<s>", 5, "x"]  # a mixed prompt is counted as /completion reads it
    assert token_count(tokenizer, {"tokens": [1, 2, 3]}) == 3
    with pytest.raises(BackendError, match="without tokens") as caught:
        token_count(tokenizer, {"error": "x"})
    assert (caught.value.status, caught.value.kind) == (502, "bad_json")
    assert token_ids(tokenizer, {"tokens": [7, 8]}) == [7, 8]
    for odd in ({"tokens": [True]}, {"tokens": "7"}, ["tokens"]):
        with pytest.raises(BackendError, match="without token ids"):
            token_ids(tokenizer, odd)


# ------------------------------------------------------------- streams recorded from a real llama-server

@pytest.mark.parametrize("per_read", [1, 3, 100])
def test_a_recorded_stream_with_probabilities_however_it_was_read(per_read: int) -> None:
    """SmolLM2 on llama-server, ``n_probs`` 2, 12 tokens: one token came with no text of its own
    (``content: ""``, held back by the server) and its text arrived with the next one."""
    events = recorded("llamacpp-completion-logprobs.sse")
    reads = [events[i:i + per_read] for i in range(0, len(events), per_read)]
    deltas, (finish,) = run(LlamaCpp().decoder(GenerationRequest("p", logprobs=2)), *reads)
    contents = [e["content"] for e in events if e is not None]
    assert "".join(d.text for d in deltas) == "".join(contents) and "" in contents
    assert sum(d.tokens for d in deltas) == sum(1 for c in contents if c)
    assert deltas[0].prompt_tokens == 15 and all(d.prompt_tokens is None for d in deltas[1:])
    pieces = [piece for d in deltas for piece in d.pieces or []]
    assert "".join(text for text, _ in pieces) == "".join(contents)
    assert sum(len(tokens) for _, tokens in pieces) == 12  # every token reported once, none lost
    held = next(tokens for _, tokens in pieces if len(tokens) == 2)
    assert held[0].token == "" and held[0].top[0].token == " of"
    assert finish.reason == "length" and finish.usage is not None
    assert (finish.usage.prompt_tokens, finish.usage.completion_tokens, finish.usage.cached_tokens) == (15, 12, 0)


def test_a_recorded_stream_without_probabilities() -> None:
    deltas, (finish,) = run(LlamaCpp().decoder(GenerationRequest("p")), recorded("llamacpp-completion-limit.sse"))
    (delta,) = deltas
    assert delta.text == "The number of ways to choose" and delta.tokens == 6 and delta.pieces is None
    assert finish.reason == "length" and finish.usage is not None and finish.usage.completion_tokens == 6


def test_facts_from_a_real_llama_servers_answers() -> None:
    facts = LlamaCpp().facts({"models": answer("llamacpp-models.json"), "props": answer("llamacpp-props.json"),
                              "bos": {"tokens": []}})
    assert facts.model == "/models/SmolLM2-135M-Instruct.Q4_1.gguf" and facts.context_length == 2048
    assert facts.template is not None and facts.template.source.startswith("{% for message in messages %}")
    assert (facts.template.bos_token, facts.template.eos_token) == ("<|im_start|>", "<|im_end|>")
    assert LlamaCpp.recognises(answer("llamacpp-props.json"))
