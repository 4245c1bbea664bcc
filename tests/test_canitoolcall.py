"""Conformance with the CanIToolCall fixture corpus (PyPI ``canitoolcall``), via its pytest plugin.

Every fixture is parsed non-streaming, then streamed in text chunks that keep the family's
special markers whole (one chunk, per character, seeded random splits), in two delivery modes:

* incremental (the default): what an OpenAI client accumulates from our deltas. For outputs cut
  inside a call (``truncated`` / ``malformed`` fixtures) the client may already hold a partial
  call; that is allowed only if the stream's last chunk says ``finish_reason: "length"`` — such
  cases are counted (``PARTIAL_CALL_CASES``) and must otherwise conform;
* held (``hold_tool_calls``): each call is delivered whole once complete — must always conform.

All results must also equal the non-streaming parse. Known deviations are listed in
``KNOWN_DEVIATIONS`` with the reason; everything else must pass strictly.
"""

from __future__ import annotations

import random
import re
from typing import Any

import pytest
from canitoolcall.fixtures import Fixture
from canitoolcall.pytest_plugin import assert_conforms, assert_equivalent, family_for
from canitoolcall.results import ParsedToolCall, ParseResult

from app.api.chat.encode import finish_reason
from parsers import CallArgs, CallEnd, CallStart, Content, Event, Reasoning, build_response_parser, fold
from parsers.fold import CallHolder

# reference-model variant (family.json) -> (tool-call parser, reasoning parser)
VARIANT_PARSERS: dict[str, tuple[str | None, str | None]] = {
    "deepseek-v3": ("deepseekv3", "deepseek-v3"),
    "deepseek-v31": ("deepseekv31", "deepseek-v3"),
    "deepseek-v32": ("deepseekv32", "deepseek-v3"),
    "deepseek-v4": ("deepseekv4", "deepseek-v3"),
    "deepseek-v41": ("deepseekv4", "deepseek-v3"),
    "gemma4": ("gemma4", "gemma4"),
    "glm45-newline": ("glm45", "glm45"),
    "glm47-compact": ("glm47", "glm45"),
    "glm53-compact": ("glm47", "glm45"),
    "gpt-oss": ("gpt-oss", "gpt-oss"),
    "kimi-k2-thinking": ("kimi_k2", "kimi_k2"),
    "kimi-k2-instruct": ("kimi_k2", "kimi_k2"),
    "kimi-k3-xtml": ("kimi_k3", "kimi_k3"),
    "llama3-json": ("llama3", None),
    "llama4-pythonic": ("pythonic", None),
    "qwen3-hybrid": ("qwen25", "qwen3"),
    "qwen3-thinking-2507": ("qwen25", "qwen3"),
    "qwen3-instruct-2507": ("qwen25", "qwen3"),
    "qwen3.8": ("qwen3_coder", "qwen3"),
    "qwen3.6": ("qwen3_coder", "qwen3"),
    "qwen3.5": ("qwen3_coder", "qwen3"),
    "qwen3-coder": ("qwen3_coder", "qwen3"),
    "qwen3-coder-next": ("qwen3_coder", "qwen3"),
}
MISTRAL_VARIANTS = ("v13-think", "v13plus-think", "v13", "devstral-2507", "v11", "v11-think-text", "v3")
VARIANT_PARSERS.update({v: ("mistral", "mistral") for v in MISTRAL_VARIANTS})

# fixture id -> why we knowingly differ (kept short and honest; reported in the closing note)
KNOWN_DEVIATIONS: dict[str, str] = {
    # gemma4/sglang-text-before-call expects "Some text before " (space kept) and
    # gemma4/sglang-text-around-call "Some text before  after"; this vLLM-derived case expects the
    # same kind of space dropped. No one rule satisfies both; we keep text as written (soft pass).
    "gemma4/vllm-text-before-call": "contradicts the sglang-text-before/around-call fixtures on whitespace",
    # A pythonic list cut after its first complete call: the fixture wants no call, while the
    # *-truncated-second-parallel-call fixtures want the complete first call of separate blocks
    # kept. One rule for every shape (issue 39, item 7): the calls completed before the cut stand,
    # streamed as each completes — holding a list's calls until it closes would stop every call
    # list (pythonic, JSON, tool_choice "required" on vLLM) from streaming its arguments.
    "llama/l4-truncated-missing-close-bracket": "keeps the complete first call of a cut-off list",
}

RANDOM_SEEDS = (1, 2, 3, 4, 5)
PARTIAL_CALL_CASES: set[str] = set()


def _reference(fixture: Fixture) -> Any:
    family = family_for(fixture)
    assert family is not None, fixture.id
    ref = family.reference_for(fixture.models[0])
    assert ref is not None, f"{fixture.id}: no reference model {fixture.models[0]}"
    return ref


def parsers_for(fixture: Fixture) -> tuple[str | None, str | None, str]:
    ref = _reference(fixture)
    tool, reasoning = VARIANT_PARSERS[ref.variant]
    prompt = fixture.generation_prompt if fixture.generation_prompt is not None else ref.default_generation_prompt
    return tool, reasoning, prompt or ""


def _marker_units(text: str, markers: list[str]) -> list[str]:
    """``text`` as a list of atoms: every marker occurrence whole, other characters one by one."""
    if not markers:
        return list(text)
    pattern = re.compile("|".join(re.escape(m) for m in sorted(markers, key=len, reverse=True)))
    units: list[str] = []
    pos = 0
    for match in pattern.finditer(text):
        units.extend(text[pos:match.start()])
        units.append(match.group())
        pos = match.end()
    units.extend(text[pos:])
    return units


def chunkings(fixture: Fixture) -> dict[str, list[str]]:
    family = family_for(fixture)
    markers = list(family.markers) if family else []
    units = _marker_units(fixture.raw_output, markers)
    out = {"one": [fixture.raw_output], "char": units}
    for seed in RANDOM_SEEDS:
        rng = random.Random(seed)
        chunks, i = [], 0
        while i < len(units):
            n = rng.randint(1, 8)
            chunks.append("".join(units[i:i + n]))
            i += n
        out[f"rand:{seed}:8"] = chunks
    return out


def run(fixture: Fixture, chunks: list[str]) -> list[Event]:
    tool, reasoning, prompt = parsers_for(fixture)
    parser = build_response_parser(fixture.tools, tool, reasoning, prompt)
    events: list[Event] = []
    for chunk in chunks:
        events += parser.feed(chunk)
    return events + parser.end(truncated=fixture.truncated)


def as_result(events: list[Event]) -> ParseResult:
    """What an OpenAI client accumulates from these events (partial calls included)."""
    content: list[str] = []
    reasoning: list[str] = []
    calls: dict[int, list[str]] = {}
    for event in events:
        if isinstance(event, Content):
            content.append(event.text)
        elif isinstance(event, Reasoning):
            reasoning.append(event.text)
        elif isinstance(event, CallStart):
            calls[event.index] = [event.name]
        elif isinstance(event, CallArgs):
            calls[event.index].append(event.text)
    return ParseResult(
        content="".join(content) or None,
        reasoning_content="".join(reasoning) or None,
        tool_calls=tuple(ParsedToolCall(parts[0], "".join(parts[1:])) for _, parts in sorted(calls.items())),
    )


def nonstream_result(fixture: Fixture) -> ParseResult:
    message = fold(run(fixture, [fixture.raw_output]))
    return ParseResult(
        content=message.content or None,
        reasoning_content=message.reasoning or None,
        tool_calls=tuple(ParsedToolCall(c.name, c.arguments) for c in message.calls),
    )


def _skip_known(fixture: Fixture) -> None:
    if fixture.id in KNOWN_DEVIATIONS:
        pytest.xfail(KNOWN_DEVIATIONS[fixture.id])


def test_nonstream(canitoolcall_fixture: Fixture) -> None:
    _skip_known(canitoolcall_fixture)
    assert_conforms(canitoolcall_fixture, nonstream_result(canitoolcall_fixture))


def test_stream_incremental(canitoolcall_fixture: Fixture) -> None:
    fixture = canitoolcall_fixture
    _skip_known(fixture)
    whole = nonstream_result(fixture)
    for name, chunks in chunkings(fixture).items():
        events = run(fixture, chunks)
        unfinished = sum(1 for e in events if isinstance(e, CallEnd) and not e.ok)
        completed = sum(1 for e in events if isinstance(e, CallEnd) and e.ok)
        if unfinished:
            # a partial call was shown: allowed only for error fixtures, flagged by finish_reason
            assert fixture.expected_error is not None or fixture.expected is not None, name
            backend = "length" if fixture.truncated else "stop"
            assert finish_reason(backend, completed, unfinished, False) == "length", name
            PARTIAL_CALL_CASES.add(fixture.id)
            assert_equivalent(whole, fold_result(CallHolder()(events)))
            continue
        streamed = as_result(events)
        try:
            assert_conforms(fixture, streamed)
            assert_equivalent(whole, streamed)
        except AssertionError as exc:
            raise AssertionError(f"chunking {name}: {exc}") from None


def fold_result(events: list[Event]) -> ParseResult:
    return as_result(events)


def test_stream_held(canitoolcall_fixture: Fixture) -> None:
    fixture = canitoolcall_fixture
    _skip_known(fixture)
    for name, chunks in chunkings(fixture).items():
        streamed = as_result(CallHolder()(run(fixture, chunks)))
        try:
            assert_conforms(fixture, streamed)
        except AssertionError as exc:
            raise AssertionError(f"chunking {name}: {exc}") from None
