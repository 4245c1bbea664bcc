"""Chat Completions ``logprobs`` / ``top_logprobs`` and ``n`` > 1, over HTTP with the ``openai`` SDK,
against scripted backends in vLLM's and llama-server's dialects."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from app.backends.generation import TokenLogprob
from app.pipeline.logprobs import ContentLogprobs, LoggedContent
from parsers import build_response_parser
from parsers.events import Content, Reasoning
from tests.conftest import QWEN3_TEMPLATE, client_for, sse_events
from tests.proxy_server import ProxyServer
from tests.scripted_backend import Script, ScriptedBackend

DIALECTS = ["vllm", "llamacpp"]
MESSAGES = [{"role": "user", "content": "Weather in Paris?"}]
TOOLS: list[dict[str, Any]] = [
    {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
]
CALL = ["<tool_call>", '\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n', "</tool_call>"]
# reasoning, then content, then a call: only the two content tokens are content
MIXED = ["<think>", "\nI should", " check.", "\n</think>", "\n\n", "Let me", " look.", "\n", *CALL]

Factory = Callable[..., Any]


def qwen3(backend_factory: Factory, proxy_factory: Factory, kind: str, **settings: Any) -> tuple[ScriptedBackend,
                                                                                                   ProxyServer]:
    backend = backend_factory(kind, model="Qwen/Qwen3-8B")
    proxy = proxy_factory(backend=backend.url, chat_template=str(QWEN3_TEMPLATE), reasoning_parser="qwen3",
                          tool_call_parser="qwen25", **settings)
    return backend, proxy


def streamed(proxy: ProxyServer, **body: Any) -> list[dict[str, Any]]:
    response = httpx.post(proxy.url + "/v1/chat/completions", timeout=30,
                          json={"model": "x", "messages": MESSAGES, "stream": True, **body})
    assert response.status_code == 200, response.text
    events = sse_events(response)
    assert events[-1] == "[DONE]"
    return events[:-1]


def streamed_logprobs(chunks: list[dict[str, Any]], index: int = 0) -> list[dict[str, Any]]:
    return [entry for c in chunks for choice in c["choices"] if choice["index"] == index and choice["logprobs"]
            for entry in choice["logprobs"]["content"]]


# ------------------------------------------------------------------------------ logprobs


@pytest.mark.parametrize("kind", DIALECTS)
def test_logprobs_one_entry_per_content_token(backend_factory, proxy_factory, kind: str) -> None:
    backend, proxy = qwen3(backend_factory, proxy_factory, kind)
    backend.script(Script(pieces=["Hello", " there", "!"], logprobs=[-0.5, -1.25, -0.125]))
    result = client_for(proxy).chat.completions.create(model="x", messages=MESSAGES, logprobs=True, top_logprobs=2)
    choice = result.choices[0]
    assert choice.message.content == "Hello there!"
    content = choice.logprobs.content
    assert [t.token for t in content] == ["Hello", " there", "!"]
    assert [t.logprob for t in content] == [-0.5, -1.25, -0.125]
    assert content[1].bytes == list(b" there")
    assert [(a.token, a.logprob) for a in content[1].top_logprobs] == [(" there", -1.25), ("alt1", -2.25)]
    body = backend.bodies()[-1]
    assert (body["logprobs"] if kind == "vllm" else body["n_probs"]) == 2


@pytest.mark.parametrize("kind", DIALECTS)
def test_logprobs_without_top_logprobs_and_not_asked(backend_factory, proxy_factory, kind: str) -> None:
    backend, proxy = qwen3(backend_factory, proxy_factory, kind)
    client = client_for(proxy)
    backend.script(Script(pieces=["Hi", "!"]))
    content = client.chat.completions.create(model="x", messages=MESSAGES, logprobs=True).choices[0].logprobs.content
    assert [(t.token, t.logprob, t.top_logprobs) for t in content] == [("Hi", -0.1, []), ("!", -0.2, [])]
    # llama-server reports no probabilities for n_probs 0: one is asked for and none shown
    assert (backend.bodies()[-1]["logprobs"] if kind == "vllm" else backend.bodies()[-1]["n_probs"]) == \
        (0 if kind == "vllm" else 1)
    backend.script(Script(pieces=["Hi", "!"]))
    assert client.chat.completions.create(model="x", messages=MESSAGES).choices[0].logprobs is None
    assert "logprobs" not in backend.bodies()[-1] and "n_probs" not in backend.bodies()[-1]
    backend.script(Script(pieces=["Hi", "!"]))
    chunks = streamed(proxy)
    assert all(choice["logprobs"] is None for c in chunks for choice in c["choices"])


@pytest.mark.parametrize("kind", DIALECTS)
def test_reasoning_and_tool_call_tokens_get_no_entries(backend_factory, proxy_factory, kind: str) -> None:
    backend, proxy = qwen3(backend_factory, proxy_factory, kind)
    backend.script(Script(pieces=MIXED))
    whole = client_for(proxy).chat.completions.create(model="x", messages=MESSAGES, tools=TOOLS, logprobs=True,
                                                      top_logprobs=1)
    choice = whole.choices[0]
    assert choice.message.reasoning_content == "I should check."
    assert choice.message.content == "Let me look."
    assert choice.message.tool_calls[0].function.name == "get_weather"
    entries = [e.model_dump() for e in choice.logprobs.content]
    assert [e["token"] for e in entries] == ["Let me", " look."]
    assert [e["logprob"] for e in entries] == [-0.6, -0.7]  # pieces 6 and 7 of the script

    backend.script(Script(pieces=MIXED, delay=0.002))
    chunks = streamed(proxy, tools=TOOLS, logprobs=True, top_logprobs=1)
    assert streamed_logprobs(chunks) == entries
    for chunk in chunks:  # entries ride on the content chunk whose text they are
        choice = chunk["choices"][0]
        if choice["logprobs"] is not None:
            assert "".join(e["token"] for e in choice["logprobs"]["content"]) == choice["delta"]["content"]
        else:
            assert not choice["delta"].get("content")

    backend.script(Script(pieces=MIXED, delay=0.002))  # the SDK's stream helper gathers them too
    with client_for(proxy).chat.completions.stream(model="x", messages=MESSAGES, tools=TOOLS, logprobs=True,
                                                   top_logprobs=1) as stream:
        final = stream.get_final_completion()
    assert [e.model_dump() for e in final.choices[0].logprobs.content] == entries


@pytest.mark.parametrize("kind", DIALECTS)
def test_tokens_straddling_a_boundary_count_by_the_text_they_give(backend_factory, proxy_factory, kind: str) -> None:
    backend, proxy = qwen3(backend_factory, proxy_factory, kind)
    pieces = ["<think>", "plan", "</think>\n\nThe", " answer", " is a<", "b.", "\n", *CALL]
    backend.script(Script(pieces=pieces))
    whole = client_for(proxy).chat.completions.create(model="x", messages=MESSAGES, tools=TOOLS, logprobs=True)
    choice = whole.choices[0]
    assert choice.message.content == "The answer is a<b."
    # "</think>\n\nThe" gave "The"; " is a<" was held back over its "<", then released with "b."
    assert [e.token for e in choice.logprobs.content] == ["</think>\n\nThe", " answer", " is a<", "b."]
    backend.script(Script(pieces=pieces))
    chunks = streamed(proxy, tools=TOOLS, logprobs=True)
    assert streamed_logprobs(chunks) == [e.model_dump() for e in choice.logprobs.content]


def test_llamacpp_token_without_text_goes_with_the_next_piece(backend_factory, proxy_factory) -> None:
    """llama-server sends ``content: ""`` for a token whose text is not complete yet (half a UTF-8
    character, a held stop-string prefix); its entry comes with the text that completes it."""
    backend, proxy = qwen3(backend_factory, proxy_factory, "llamacpp")
    backend.script(Script(pieces=["Caf", "", "é", "!"], tokens=[["Caf"], ["\ufffd"], ["\ufffd"], ["!"]]))
    content = client_for(proxy).chat.completions.create(model="x", messages=MESSAGES,
                                                        logprobs=True).choices[0].logprobs.content
    assert [(t.token, t.logprob) for t in content] == [("Caf", -0.1), ("\ufffd", -0.2), ("\ufffd", -0.3), ("!", -0.4)]


def test_vllm_chunk_of_several_tokens(backend_factory, proxy_factory) -> None:
    backend, proxy = qwen3(backend_factory, proxy_factory, "vllm")
    backend.script(Script(pieces=["<think>", "ok", "</think>", "Hello there", "!"],
                          tokens=[["<think>"], ["ok"], ["</think>"], ["Hello", " there"], ["!"]]))
    content = client_for(proxy).chat.completions.create(model="x", messages=MESSAGES,
                                                        logprobs=True).choices[0].logprobs.content
    assert [t.token for t in content] == ["Hello", " there", "!"]


@pytest.mark.parametrize(("body", "param", "needle"), [
    ({"top_logprobs": 2}, "top_logprobs", "needs logprobs: true"),
    ({"logprobs": False, "top_logprobs": 0}, "top_logprobs", "needs logprobs: true"),
    ({"logprobs": True, "top_logprobs": 21}, "top_logprobs", "between 0 and 20"),
    ({"logprobs": True, "top_logprobs": -1}, "top_logprobs", "between 0 and 20"),
    ({"n": 9}, "n", "at most 8 choices"),
    ({"n": 0}, "n", "greater than or equal to 1"),
])
def test_logprobs_and_n_validation(qwen3_vllm, body: dict[str, Any], param: str, needle: str) -> None:
    backend, proxy = qwen3_vllm
    response = httpx.post(proxy.url + "/v1/chat/completions", timeout=30,
                          json={"model": "x", "messages": MESSAGES, **body})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param and needle in error["message"]
    assert backend.bodies() == []


# ------------------------------------------------------------------------------ n > 1

CHOICES = [
    Script(pieces=["Sunny", " in", " Paris."]),
    Script(pieces=["Checking.", "\n", *CALL]),
    Script(pieces=["<think>", "hmm", "</think>", "\n\n", "No idea."]),
]


def check_three_choices(choices: list[Any]) -> None:
    assert [c.index for c in choices] == [0, 1, 2]
    first, second, third = choices
    assert (first.message.content, first.message.tool_calls, first.finish_reason) == ("Sunny in Paris.", None, "stop")
    assert second.message.content == "Checking."
    assert [(c.function.name, json.loads(c.function.arguments)) for c in second.message.tool_calls] == \
        [("get_weather", {"city": "Paris"})]
    assert second.finish_reason == "tool_calls"
    assert (third.message.content, third.message.reasoning_content, third.finish_reason) == ("No idea.", "hmm", "stop")


def test_vllm_n_is_one_request_parsed_per_choice(qwen3_vllm) -> None:
    backend, proxy = qwen3_vllm
    client = client_for(proxy)
    backend.script(Script(choices=CHOICES, prompt_tokens=9))
    whole = client.chat.completions.create(model="x", messages=MESSAGES, tools=TOOLS, n=3)
    check_three_choices(whole.choices)
    assert [b.get("n") for b in backend.bodies()] == [3]
    assert (whole.usage.prompt_tokens, whole.usage.completion_tokens) == (9, 3 + 5 + 5)

    backend.script(Script(choices=CHOICES, prompt_tokens=9, delay=0.002))
    with client.chat.completions.stream(model="x", messages=MESSAGES, tools=TOOLS, n=3,
                                        stream_options={"include_usage": True}) as stream:
        final = stream.get_final_completion()
    check_three_choices(final.choices)
    assert final.usage is not None and final.usage.completion_tokens == 13


def test_vllm_n_stream_shape(qwen3_vllm) -> None:
    backend, proxy = qwen3_vllm
    backend.script(Script(choices=CHOICES[:2], delay=0.002))
    chunks = streamed(proxy, tools=TOOLS, n=2, stream_options={"include_usage": True})
    assert [c["choices"][0]["delta"] for c in chunks[:2]] == [{"role": "assistant", "content": None}] * 2
    assert [c["choices"][0]["index"] for c in chunks[:2]] == [0, 1]
    assert all(len(c["choices"]) == 1 for c in chunks[:-1])
    finishes = [(c["choices"][0]["index"], c["choices"][0]["finish_reason"]) for c in chunks[:-1]
                if c["choices"][0]["finish_reason"]]
    assert sorted(finishes) == [(0, "stop"), (1, "tool_calls")]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 3 + 5
    tool_chunks = [c for c in chunks if c["choices"] and c["choices"][0]["delta"].get("tool_calls")]
    assert tool_chunks and all(c["choices"][0]["index"] == 1 for c in tool_chunks)


def test_llamacpp_n_fans_out_one_request_per_choice(backend_factory, proxy_factory) -> None:
    backend, proxy = qwen3(backend_factory, proxy_factory, "llamacpp")
    by_seed = {40: CHOICES[0], 41: CHOICES[1], 42: CHOICES[2]}
    backend.responder = lambda body: by_seed[body["seed"]]
    client = client_for(proxy)
    whole = client.chat.completions.create(model="x", messages=MESSAGES, tools=TOOLS, n=3, seed=40)
    check_three_choices(whole.choices)
    assert sorted(b["seed"] for b in backend.bodies()) == [40, 41, 42]
    assert len({b["prompt"] for b in backend.bodies()}) == 1 and all("n" not in b for b in backend.bodies())
    assert (whole.usage.prompt_tokens, whole.usage.completion_tokens) == (7, 3 + 5 + 5)

    with client.chat.completions.stream(model="x", messages=MESSAGES, tools=TOOLS, n=3, seed=40) as stream:
        final = stream.get_final_completion()
    check_three_choices(final.choices)


def test_llamacpp_n_without_seed_sends_none(backend_factory, proxy_factory) -> None:
    backend, proxy = qwen3(backend_factory, proxy_factory, "llamacpp")
    result = client_for(proxy).chat.completions.create(model="x", messages=MESSAGES, n=2)
    assert [c.message.content for c in result.choices] == ["Hello!", "Hello!"]
    assert len(backend.bodies()) == 2 and all("seed" not in b for b in backend.bodies())


@pytest.mark.parametrize("kind", DIALECTS)
def test_n_with_logprobs_per_choice(backend_factory, proxy_factory, kind: str) -> None:
    backend, proxy = qwen3(backend_factory, proxy_factory, kind)
    scripts = [Script(pieces=["A", "b"], logprobs=[-1.0, -2.0]), Script(pieces=["<think>", "x", "</think>", "C"],
                                                                        logprobs=[-3.0, -4.0, -5.0, -6.0])]
    if kind == "vllm":
        backend.script(Script(choices=scripts))
    else:
        backend.responder = lambda body: scripts[body["seed"] - 1]
    whole = client_for(proxy).chat.completions.create(model="x", messages=MESSAGES, n=2, seed=1, logprobs=True)
    assert [[(e.token, e.logprob) for e in c.logprobs.content] for c in whole.choices] == \
        [[("A", -1.0), ("b", -2.0)], [("C", -6.0)]]
    if kind == "vllm":
        backend.script(Script(choices=scripts))
    chunks = streamed(proxy, n=2, seed=1, logprobs=True)
    for k, choice in enumerate(whole.choices):
        assert streamed_logprobs(chunks, k) == [e.model_dump() for e in choice.logprobs.content]


def test_backend_failure_in_one_fanned_out_choice(backend_factory, proxy_factory) -> None:
    backend, proxy = qwen3(backend_factory, proxy_factory, "llamacpp")
    backend.responder = lambda body: Script(status=400) if body["seed"] == 6 else Script(pieces=["fine"])
    response = httpx.post(proxy.url + "/v1/chat/completions", timeout=30,
                          json={"model": "x", "messages": MESSAGES, "n": 2, "seed": 5})
    assert response.status_code == 400 and "backend says no" in response.json()["error"]["message"]

    backend.responder = lambda body: (Script(pieces=["a", "b", "c"], fault="drop", fault_after=1, delay=0.01)
                                      if body["seed"] == 6 else Script(pieces=["fine"], delay=0.01))
    events = sse_events(httpx.post(proxy.url + "/v1/chat/completions", timeout=30, json={
        "model": "x", "messages": MESSAGES, "n": 2, "seed": 5, "stream": True}))
    assert "error" in events[-1] and "[DONE]" not in events


# ------------------------------------------------------------------------------ the attribution, sans-IO


def attribute(pieces: list[str], parser: Any) -> list[list[str]]:
    """Feed ``pieces`` (one token each) through ``parser``; the tokens each content event carries."""
    track = ContentLogprobs(0)
    out: list[list[str]] = []
    for piece in pieces:
        track.add(piece, [TokenLogprob(piece, -1.0)])
        out += [[e["token"] for e in ev.logprobs] for ev in track.place(parser.feed(piece))
                if isinstance(ev, LoggedContent)]
    out += [[e["token"] for e in ev.logprobs] for ev in track.place(parser.end()) if isinstance(ev, LoggedContent)]
    return out


def test_content_joined_across_removed_markup_is_matched_char_by_char() -> None:
    parser = build_response_parser(None, None, "granite", in_reasoning=False)  # drops <response> from content
    assert attribute(["<think>", "think</think>", "x", "A<response>B", "C"], parser) == \
        [["x"], ["A<response>B"], ["C"]]


def test_placed_reasoning_moves_the_search_on() -> None:
    """Reasoning text is placed too, so a long reasoning block never widens the text searched for
    the content after it (each batch's search starts where the last placed text ended)."""
    parser = build_response_parser(None, None, "qwen3", in_reasoning=True)
    track = ContentLogprobs(0)
    for i in range(200):
        piece = f" step{i}"
        track.add(piece, [TokenLogprob(piece, -1.0)])
        track.place(parser.feed(piece))
        assert track.length - track.cursor <= 2 * len(piece)
    for piece in ["</think>", "Done", "."]:
        track.add(piece, [TokenLogprob(piece, -1.0)])
        track.place(parser.feed(piece))
    assert track.length - track.cursor <= 1


def test_content_that_is_not_in_the_output_goes_to_the_piece_just_read() -> None:
    track = ContentLogprobs(0)
    track.add("<a>", [TokenLogprob("<a>", -1.0)])
    track.add("b", [TokenLogprob("b", -2.0)])
    placed = track.place([Reasoning("a"), Content("rewritten")])
    assert isinstance(placed[1], LoggedContent) and [e["token"] for e in placed[1].logprobs] == ["b"]
    assert track.place([Content("again")]) == [LoggedContent("again", [])]  # a piece gives its entries once
