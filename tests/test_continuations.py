"""Continuations (assistant prefill) against llama.cpp's own expectations (issue 39, item 6).

``tests/data/llamacpp_continuations.json`` holds every ``continue_final_message`` case of llama.cpp's
``test-chat.cpp`` as data: a chat template, a final assistant message (its reasoning and text), what
the model writes next, and the whole message llama.cpp expects. Each case runs through the faces
that take a prefill — Chat Completions' ``continue_final_message`` and a Messages request ending with
an assistant message (its thinking signed) — decoded by the face's own decoder, planned with the
model's template and the parsers ``auto`` picks from it, and parsed in one chunk, per character and
in random splits. The answer is only what the model added: llama.cpp's whole message less the
prefill (its reasoning and its text each begin with the prefill's).
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.api.chat.decode import chat_ask
from app.api.chat.protocol import ChatCompletionRequest
from app.api.messages.decode import messages_ask
from app.api.messages.protocol import MessagesRequest
from app.backends.base import Backend
from app.backends.vllm import Vllm
from app.formats import Formats
from app.pipeline.ask import Ask
from app.pipeline.plan import plan_request
from app.templates.autodetect import choose_parsers
from app.templates.chat_template import ChatTemplate
from app.templates.literal import ControlText
from app.thinking_signature import ThinkingSigner
from parsers import FoldedMessage, fold
from tests.conftest import TEMPLATES
from tests.harness import split_random

DATA = json.loads((Path(__file__).parent / "data" / "llamacpp_continuations.json").read_text(encoding="utf-8"))
CASES: list[dict[str, Any]] = DATA["cases"]
FACES = ("chat", "messages")
SIGNER = ThinkingSigner(b"continuations")

#: case (template:line) -> why toolwire's answer knowingly differs from llama.cpp's expectation
KNOWN: dict[str, str] = {
    "inclusionai-ling-3.0-flash.jinja:4846": "an explicit 'content' continuation of a message with a thought and no "
                                             "text: the faces take a prefill's kind from the message, as llama.cpp's "
                                             "'auto' does (no text yet: the thought goes on)",
    "moonshotai-Kimi-K2.jinja:5221": "Kimi K2 Instruct's template renders no reasoning: auto runs no reasoning parser, "
                                     "so a handed-back thought is not rendered and </think> is the model's text",
}


def _added(whole: str, prefill: str) -> str:
    """What the answer adds to ``prefill`` in llama.cpp's ``whole`` (all of it where the whole does
    not begin with the prefill: a template that never shows a handed-back thought)."""
    return whole[len(prefill):] if prefill and whole.startswith(prefill) else whole


def _id(case: dict[str, Any]) -> str:
    return f"{case['template']}:{case['line']}"


@cache
def _served(name: str) -> tuple[ChatTemplate, Formats]:
    source = (TEMPLATES / name).read_text(encoding="utf-8")
    return ChatTemplate(source, name=name), Formats.of(choose_parsers(source))


@cache
def _backend() -> Backend:
    """A vLLM backend as planning sees it (its dialect's constraints and facts; never called)."""
    return Backend("http://127.0.0.1:9", httpx.AsyncClient(), dialect=Vllm())


def _ask(case: dict[str, Any], face: str) -> Ask:
    user = {"role": "user", "content": "Hello"}
    if face == "chat":
        final = {"role": "assistant", "content": case["prefill_content"], "reasoning_content": case["prefill_reasoning"]}
        body: dict[str, Any] = {"model": "m", "messages": [user, final], "continue_final_message": True}
        if case["thinking"]:
            body["chat_template_kwargs"] = {"enable_thinking": True}
        return chat_ask(ChatCompletionRequest.model_validate(body))
    blocks: list[dict[str, Any]] = []
    if case["prefill_reasoning"]:
        thought = case["prefill_reasoning"]
        blocks.append({"type": "thinking", "thinking": thought, "signature": SIGNER.sign(thought)})
    if case["prefill_content"]:
        blocks.append({"type": "text", "text": case["prefill_content"]})
    request: dict[str, Any] = {"model": "m", "max_tokens": 64, "messages": [user, {"role": "assistant", "content": blocks}]}
    if case["thinking"]:
        request["thinking"] = {"type": "enabled", "budget_tokens": 1024}
    return messages_ask(MessagesRequest.model_validate(request), SIGNER)


def _answers(case: dict[str, Any], face: str) -> dict[str, FoldedMessage]:
    template, formats = _served(case["template"])
    plan = plan_request(_ask(case, face), formats, template, _backend())
    output = case["output"]
    found: dict[str, FoldedMessage] = {}
    for name, chunks in {"one": [output], "char": list(output), "rand": split_random(output, 3)}.items():
        parser = plan.parser()
        events = [e for chunk in chunks for e in parser.feed(chunk)]
        found[name] = fold(events + parser.end())
    return found


@pytest.mark.parametrize("face", FACES)
@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
def test_llamacpp_continuation(case: dict[str, Any], face: str) -> None:
    if _id(case) in KNOWN:
        pytest.xfail(KNOWN[_id(case)])
    expected = (_added(case["reasoning"], case["prefill_reasoning"]), _added(case["content"], case["prefill_content"]))
    for name, answer in _answers(case, face).items():
        assert (answer.reasoning, answer.content) == expected, f"{face}, chunking {name}"
        assert not answer.calls


def test_the_data_is_llamacpps_whole_set() -> None:
    """72 cases (three templates share one), both kinds, every template in ``tests/data/templates``."""
    assert len(CASES) == 72
    assert {c["kind"] for c in CASES} == {"content", "reasoning"}
    assert all((TEMPLATES / c["template"]).is_file() for c in CASES)


@pytest.mark.parametrize("kind", ["content", "reasoning"])
def test_a_continuation_where_client_control_text_is_traced(kind: str) -> None:
    """With the model's control strings traced (``app.templates.literal``), the continued message is
    written the same: the markers around it are the model's own, its texts the client's."""
    case = next(c for c in CASES if c["template"] == "Qwen3.5-4B.jinja" and c["kind"] == kind)
    template, formats = _served(case["template"])
    control = ControlText(("<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tool_call>"), mode="tokens")
    plain = plan_request(_ask(case, "chat"), formats, template, _backend())
    traced = plan_request(_ask(case, "chat"), formats, template, _backend(), control=control)
    assert (traced.prompt, traced.prefill) == (plain.prompt, plain.prefill)
    assert plain.prefill == ("I'm thinking</think>Hello, " if kind == "content" else "I'm")
    assert plain.prompt.endswith("<|im_start|>assistant\n<think>\n")
