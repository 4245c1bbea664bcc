"""The generic OpenAI completions dialect (``app.backends.openai_completions``), fed event sequences."""

from __future__ import annotations

from typing import Any

import pytest

from app.backends.generation import GenerationRequest, Sampling, TokenLogprob
from app.backends.openai_completions import CompletionsDecoder, OpenAICompletions, legacy_logprobs, split_piece
from app.errors import BackendError
from tests.app.backends.events import recorded, run


def chunk(text: str = "", finish: str | None = None, index: int = 0, usage: Any = None, **choice: Any) -> dict:
    """One ``text_completion`` chunk as OpenAI-style servers stream it."""
    return {"id": "cmpl-1", "object": "text_completion", "created": 0, "model": "m",
            "choices": [{"index": index, "text": text, "logprobs": None, "finish_reason": finish, **choice}],
            "usage": usage}


USAGE = {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8, "prompt_tokens_details": {"cached_tokens": 2}}


def test_text_of_one_read_is_one_delta_with_its_token_count() -> None:
    decoder = OpenAICompletions().decoder(GenerationRequest("p"))
    deltas, finishes = run(decoder, [chunk("Hel"), chunk("lo")], [chunk("!")],
                           [chunk(finish="stop"), {"choices": [], "usage": USAGE}, None])
    assert [(d.text, d.tokens) for d in deltas] == [("Hello", 2), ("!", 1)]
    assert all(d.pieces is None and d.prompt_tokens is None for d in deltas)  # no usage before the text
    (finish,) = finishes
    assert (finish.reason, finish.stop_sequence, finish.index) == ("stop", None, 0)
    assert finish.usage is not None
    assert (finish.usage.prompt_tokens, finish.usage.completion_tokens, finish.usage.cached_tokens) == (5, 3, 2)
    assert decoder.stop and decoder.complete


def test_length_and_the_matched_stop_string() -> None:
    _, (finish,) = run(OpenAICompletions().decoder(GenerationRequest("p")), [chunk("a", finish="length"), None])
    assert finish.reason == "length" and finish.stop_sequence is None
    _, (finish,) = run(OpenAICompletions().decoder(GenerationRequest("p")),
                       [chunk("a"), chunk(finish="stop", stop_reason="END"), None])
    assert finish.reason == "stop" and finish.stop_sequence == "END"


def test_without_done_the_stream_is_complete_once_the_choice_finished() -> None:
    decoder = OpenAICompletions().decoder(GenerationRequest("p"))
    decoder.decode([chunk("a")])
    assert not decoder.complete
    decoder.decode([chunk(finish="stop")])
    assert decoder.complete and not decoder.stop  # keep reading: the usage chunk may follow
    assert decoder.end()[0].usage is None


def test_a_stream_that_ends_without_a_finish_reason_is_a_502() -> None:
    decoder = OpenAICompletions().decoder(GenerationRequest("p"))
    decoder.decode([chunk("a"), None])
    assert decoder.stop and decoder.complete  # [DONE] was seen: the connection is reusable …
    with pytest.raises(BackendError, match="without a finish reason") as caught:
        decoder.end()  # … but the answer is broken
    assert caught.value.status == 502 and caught.value.kind == "dropped"


def test_prompt_tokens_ride_on_the_first_delta_once_a_usage_told_them() -> None:
    decoder = OpenAICompletions().decoder(GenerationRequest("p"))
    usage = {"prompt_tokens": 11, "completion_tokens": 1}
    deltas, _ = run(decoder, [chunk("a", usage=usage)], [chunk("b", usage=usage)], [chunk(finish="stop"), None])
    assert [d.prompt_tokens for d in deltas] == [11, None]


def test_a_generic_backend_gets_one_answer_per_request_whatever_the_index() -> None:
    decoder = OpenAICompletions().decoder(GenerationRequest("p", n=3))
    deltas, finishes = run(decoder, [chunk("a", index=7), chunk(finish="stop", index=7), None])
    assert [d.index for d in deltas] == [0] and [f.index for f in finishes] == [0]


@pytest.mark.parametrize(("event", "what"), [
    ({"choices": {"text": "a"}}, '"choices" is not a list'),
    ({"choices": ["a"]}, 'an element of "choices" is not an object'),
    ({"choices": [{"text": 5}]}, '"text" is not a string'),
    ({"choices": [], "usage": [1]}, '"usage" is not an object'),
])
def test_events_of_the_wrong_shape_are_a_502_naming_the_field(event: dict, what: str) -> None:
    decoder = OpenAICompletions().decoder(GenerationRequest("p"))
    with pytest.raises(BackendError) as caught:
        decoder.decode([chunk("fine"), event])
    assert caught.value.status == 502 and caught.value.kind == "bad_shape" and what in caught.value.message


def test_events_without_choices_or_text_are_skipped() -> None:
    deltas, (finish,) = run(OpenAICompletions().decoder(GenerationRequest("p")),
                            [{"object": "ping"}, chunk(""), chunk("x"), chunk(finish="stop"), None])
    assert [d.text for d in deltas] == ["x"] and finish.reason == "stop"


# ---------------------------------------------------------------------------------------- logprobs

def lp(tokens: list[str], values: list[float], tops: list[dict[str, float]] | None = None) -> dict:
    return {"tokens": tokens, "token_logprobs": values, "top_logprobs": tops or [{} for _ in tokens],
            "text_offset": [0] * len(tokens)}


def test_logprobs_split_per_token_and_tokens_without_text_go_to_the_next_piece() -> None:
    decoder = OpenAICompletions().decoder(GenerationRequest("p", logprobs=1))
    deltas, _ = run(decoder, [
        chunk("ab", logprobs=lp(["a", "b"], [-0.5, -0.25], [{"a": -0.5, "z": -2.0}, {"b": -0.25}])),
        chunk("", logprobs=lp(["\xe2"], [-1.0])),  # half a character: no text of its own yet
        chunk("€", logprobs=lp(["\x82\xac"], [-0.1])),
    ], [chunk(finish="stop"), None])
    (delta,) = deltas
    assert delta.text == "ab€" and delta.tokens == 2  # two events carried text
    assert delta.pieces is not None
    assert [(text, [t.token for t in tokens]) for text, tokens in delta.pieces] == [
        ("a", ["a"]), ("b", ["b"]), ("€", ["\xe2", "\x82\xac"])]
    first = delta.pieces[0][1][0]
    assert first.logprob == -0.5 and [(t.token, t.logprob) for t in first.top] == [("a", -0.5)]  # top 1


def test_without_logprobs_asked_pieces_stay_none() -> None:
    deltas, _ = run(OpenAICompletions().decoder(GenerationRequest("p")),
                    [chunk("a", logprobs=lp(["a"], [-0.5])), chunk(finish="stop"), None])
    assert deltas[0].pieces is None


@pytest.mark.parametrize("logprobs", [[1], {"tokens": ["a"], "token_logprobs": []}, {"tokens": [1], "token_logprobs": [0]}])
def test_logprobs_of_the_wrong_shape_are_a_502(logprobs: Any) -> None:
    with pytest.raises(BackendError) as caught:
        OpenAICompletions().decoder(GenerationRequest("p", logprobs=0)).decode([chunk("a", logprobs=logprobs)])
    assert caught.value.kind == "bad_shape"


def test_legacy_logprobs_floor_odd_values_and_rank_alternatives() -> None:
    (token,) = legacy_logprobs(lp(["a"], [None], [{"b": -1.0, "c": -0.5, "a": float("nan")}]), 2)  # type: ignore[list-item]
    assert token.logprob == -9999.0 and token.bytes == [97]
    assert [(t.token, t.logprob) for t in token.top] == [("c", -0.5), ("b", -1.0)]


def test_a_piece_whose_tokens_do_not_spell_it_stays_whole() -> None:
    piece = ("ab", [TokenLogprob("x", -1.0), TokenLogprob("y", -1.0)])
    assert split_piece(piece) == [piece]


# ------------------------------------------------------------------------------- request and probe

def test_body_sends_what_is_set_and_nothing_else() -> None:
    sampling = Sampling(max_tokens=9, temperature=0.5, stop=["x"], logit_bias={42: -100.0}, top_k=3)
    body = OpenAICompletions().body(GenerationRequest("hi", sampling, constraint={"extra": 1}, n=2), "m")
    assert body == {"model": "m", "prompt": "hi", "stream": True, "stream_options": {"include_usage": True},
                    "max_tokens": 9, "temperature": 0.5, "stop": ["x"], "logit_bias": {"42": -100.0}, "extra": 1}
    assert "model" not in OpenAICompletions().body(GenerationRequest("hi"), None)


def test_facts_read_the_model_and_a_context_length_where_the_server_gives_one() -> None:
    models = {"data": [{"id": "org/model", "max_model_len": 8192}, {"id": "other"}]}
    facts = OpenAICompletions().facts({"models": models})
    assert (facts.model, facts.context_length, facts.template, facts.adds_bos) == ("org/model", 8192, None, False)
    assert OpenAICompletions().facts({"models": {"data": [{"id": 7}]}}).model == "7"


@pytest.mark.parametrize("answer", [None, [], {"data": []}, {"data": "x"}, {"data": [{}]}, {"data": [{"id": "m",
                                                                                               "max_model_len": True}]}])
def test_facts_from_answers_that_do_not_say_are_empty(answer: Any) -> None:
    facts = OpenAICompletions().facts({"models": answer})
    assert facts.context_length is None and facts.model in (None, "m")


def test_the_generic_dialect_constrains_nothing_and_counts_no_tokens() -> None:
    from app.constraints.tools import ConstraintRequest

    request = ConstraintRequest.of(None, None, [], None, True, None, {"type": "json_object"})
    assert OpenAICompletions().constrain(request).fields == {}
    assert OpenAICompletions.tokenizer is None and not OpenAICompletions.native_n
    assert OpenAICompletions.sniff is None  # the fallback kind
    assert isinstance(OpenAICompletions().decoder(GenerationRequest("p")), CompletionsDecoder)


def test_a_stream_recorded_from_llama_servers_openai_completions() -> None:
    """llama-server's ``/v1/completions`` (SmolLM2, 6 tokens): text chunks, a finish chunk carrying
    the usage with cached prompt tokens, ``[DONE]``."""
    decoder = OpenAICompletions().decoder(GenerationRequest("p"))
    deltas, (finish,) = run(decoder, recorded("llamacpp-v1-completions.sse"))
    (delta,) = deltas
    assert delta.text == "The number of ways to choose" and delta.tokens == 6
    assert finish.reason == "length" and finish.usage is not None
    assert (finish.usage.prompt_tokens, finish.usage.completion_tokens, finish.usage.cached_tokens) == (15, 6, 14)
    assert decoder.stop and decoder.complete


def test_a_backend_without_a_tokenizer_refuses_to_count_and_asks_nothing() -> None:
    import asyncio

    import httpx

    from app.backends.base import Backend
    from app.errors import APIError

    backend = Backend("http://127.0.0.1:9", httpx.AsyncClient(), dialect=OpenAICompletions())
    assert not backend.counts_tokens
    with pytest.raises(APIError, match="no tokenizer endpoint") as caught:
        asyncio.run(backend.count_tokens("hello"))
    assert (caught.value.status, caught.value.code) == (400, "count_tokens_unsupported")
    with pytest.raises(NotImplementedError):
        asyncio.run(backend.tokenize("hello"))
