"""No markup ever reaches ``content`` or ``reasoning_content``, whichever parsers run (issue 27).

Every tool-call format runs with its model's own reasoning parser, with none, and with what
``auto`` picks from the model's chat template; with the request's tools (calls read) and without
(``read_calls=False``: the format still owns its envelope). Markup is what the running parsers own:
the tool format's markers (its response envelope among them) and end-of-turn tokens always —
they are the format's, whether or not calls are read — and the reasoning format's markers when a
reasoning parser runs. (With no reasoning parser a model's thinking is left as written, as
llama.cpp's ``reasoning_format: none`` leaves it: the user asked for it unparsed.)

The outputs are the models' own: every chat template in ``tests/data/templates`` renders its
assistant turns (content, reasoning, one call, two calls, content and a call; thinking on, off and
by default) after its own generation prompt; formats without a template there run their fixture
cases (``tests/fixtures``).
"""

from __future__ import annotations

from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from app.templates.autodetect import Report, analyse_template
from app.templates.autodetect.render import TOOLS, Turn
from app.templates.autodetect.select import reasoning_samples
from app.templates.chat_template import ChatTemplate
from parsers import Event, build_response_parser, fold
from parsers.registry import (
    TOOL_PARSERS,
    canonical_reasoning_parser,
    means_none,
    reasoning_detector_class,
    tool_detector_class,
)
from tests.fixture_cases import load_cases
from tests.harness import check_stream_invariants, split_random

TEMPLATES = Path(__file__).parent / "data" / "templates"

#: each tool-call format's own reasoning parser: the one its models' templates pair it with
OWN_REASONING: dict[str, str | None] = {
    "qwen25": "qwen3", "hermes": None, "llama3": None, "mistral": "mistral", "qwen3_coder": "qwen3",
    "glm45": "glm45", "glm47": "glm45", "kimi_k2": "kimi_k2", "kimi_k3": "kimi_k3", "deepseekv3": "deepseek-r1",
    "deepseekv31": "deepseek-v3", "deepseekv32": "deepseek-v3", "deepseekv4": "deepseek-v3",
    "deepseekv41": "deepseek-v3", "minimax-m2": "minimax", "minimax-m3": "minimax-m3", "pythonic": None,
    "lfm2": "qwen3", "gemma4": "gemma4", "functiongemma": None, "gpt-oss": "gpt-oss", "openchatml": None,
    "muse": "muse", "step3": "step3", "interns1": "interns1", "gigachat3": None, "gigachat35": "gigachat35",
    "mimo": "mimo", "minicpm5": "qwen3", "seed_oss": "seed_oss", "hunyuan": "hunyuan", "apertus": "apertus2509",
    "cohere": "cohere", "granite": "granite", "granite4": None, "xlam": None, "phi4_mini_json": None,
    "nemotron_nano_v2": "nemotron_3", "functionary_v31": None, "functionary_v32": None, "firefunction": None,
    "iquest_q1": "iquest_q1", "dots": "dots", "beam": "beam", "inkling": "inkling", "trinity": "qwen3",
    "k2_horizon": "k2_horizon",
}

Parser = str | type | None


def owned_markers(tool_parser: Parser, reasoning_parser: Parser, own_reasoning: Parser = None) -> tuple[str, ...]:
    """The markup of the parsers that run (see the module docstring): with no reasoning parser,
    the markers of the model's own reasoning format (``own_reasoning``) are its thinking, left as
    written, even where the tool format lists one as an end-of-turn token (Gemma 4's ``<channel|>``)."""
    found: list[str] = []
    if tool_parser is not None:
        tools = tool_detector_class(tool_parser)
        found += [*tools.markers, *tools.end_tokens]
    if reasoning_parser is not None:
        reasoning = reasoning_detector_class(reasoning_parser)
        found += [*reasoning.markers(), *reasoning.end_tokens]
    elif own_reasoning is not None:
        thinking = set(reasoning_detector_class(own_reasoning).markers())
        found = [m for m in found if m not in thinking]
    return tuple(dict.fromkeys(m for m in found if m.strip()))


def parse(output: str, chunks: list[str], prompt: str | None, tool_parser: Parser, reasoning_parser: Parser,
          tools: Any, read_calls: bool) -> list[Event]:
    chain = build_response_parser(tools, tool_parser, reasoning_parser, prompt, read_calls=read_calls)
    events: list[Event] = []
    for chunk in chunks:
        events += chain.feed(chunk)
    return events + chain.end()


def leaks(output: str, prompt: str | None, tool_parser: Parser, reasoning_parser: Parser, tools: Any,
          read_calls: bool, allowed: str = "", own_reasoning: Parser = None) -> list[str]:
    """Markup in the message, whole or streamed in random pieces (and the two must agree)."""
    markers = owned_markers(tool_parser, reasoning_parser, own_reasoning)
    whole = parse(output, [output], prompt, tool_parser, reasoning_parser, tools, read_calls)
    streamed = parse(output, split_random(output, 7), prompt, tool_parser, reasoning_parser, tools, read_calls)
    problems = check_stream_invariants(whole, markers, allowed) + check_stream_invariants(streamed, markers, allowed)
    a, b = fold(whole), fold(streamed)
    if (a.content, a.reasoning) != (b.content, b.reasoning):
        problems.append(f"streamed {(b.content, b.reasoning)!r} != whole {(a.content, a.reasoning)!r}")
    return problems


def own_reasoning(tool_parser: Parser, auto_reasoning: Parser) -> Parser:
    if isinstance(tool_parser, str):
        own = OWN_REASONING.get(tool_parser)
        return canonical_reasoning_parser(own) if own is not None else None
    return auto_reasoning


def configurations(tool_parser: Parser, auto_reasoning: Parser) -> dict[str, Parser]:
    """Reasoning parsers a format runs with: its own, none, and ``auto``'s pick."""
    if means_none(auto_reasoning):
        auto_reasoning = None
    found: dict[str, Parser] = {"none": None}
    own = own_reasoning(tool_parser, auto_reasoning)
    if own is not None:
        found["own"] = own
    if auto_reasoning is not None:
        found["auto"] = auto_reasoning
    return found


def test_every_format_has_its_own_reasoning_parser_named() -> None:
    assert set(OWN_REASONING) == set(TOOL_PARSERS)


# ------------------------------------------------------------------------------ the models' templates


@cache
def report(name: str) -> Report:
    return analyse_template(ChatTemplate((TEMPLATES / name).read_text(encoding="utf-8"), name=name))


TEMPLATE_NAMES = sorted(p.name for p in TEMPLATES.glob("*.jinja"))


def turns(rep: Report) -> list[Turn]:
    """The template's assistant turns that ``auto`` reads back: content only, each call variant,
    and its reasoning turns (thinking on, off and by default). A render goes on past the end of the
    turn (the next message's header); a model's output stops at its end-of-turn token."""
    analysis = rep.analysis
    ends = tool_detector_class(rep.tools.parser).end_tokens if rep.tools.parser is not None else ()
    found = []
    for turn in (analysis.content_turn, *analysis.turns.values(), *reasoning_samples(analysis)):
        if turn is None or not turn.output.strip():
            continue
        cut = min((turn.output.index(e) + len(e) for e in ends if e in turn.output), default=len(turn.output))
        found.append(replace(turn, output=turn.output[:cut]))
    return found


@pytest.mark.parametrize("template", TEMPLATE_NAMES)
def test_no_markup_reaches_the_message_for_any_template(template: str) -> None:
    rep = report(template)
    tool_parser, auto_reasoning = rep.tools.parser, rep.reasoning.parser
    problems: list[str] = []
    rendered = turns(rep)
    for turn in rendered:
        for label, reasoning_parser in configurations(tool_parser, auto_reasoning).items():
            for read_calls in (True, False) if not turn.variant.calls else (True,):
                if tool_parser is None and not read_calls:
                    continue
                found = leaks(turn.output, turn.prompt, tool_parser, reasoning_parser, TOOLS, read_calls,
                              own_reasoning=own_reasoning(tool_parser, auto_reasoning))
                problems += [f"{turn.variant.label}/{turn.mode}/reasoning={label}/calls={read_calls}: {p}"
                             for p in found]
    assert rendered or rep.analysis.content_turn is None, "no turn rendered"
    assert not problems, "\n".join(problems[:20])


# ------------------------------------------------------------------------------ every format's fixtures

CASES = [c for c in load_cases() if c.tool_parser and not c.markers_allowed]


@pytest.mark.parametrize("tool_parser", sorted(TOOL_PARSERS))
def test_no_markup_reaches_the_message_for_any_fixture(tool_parser: str) -> None:
    cases = [c for c in CASES if c.tool_parser == tool_parser]
    assert cases, f"no fixtures for {tool_parser}"
    problems: list[str] = []
    detector = tool_detector_class(tool_parser)()
    for case in cases:
        allowed = case.content + case.reasoning
        answer_only = not case.calls and not detector.has_tool_call(case.output)  # with no tools offered, too
        for label, reasoning_parser in configurations(tool_parser, case.reasoning_parser).items():
            for read_calls in (True, False) if answer_only else (True,):
                found = leaks(case.output, case.prompt, tool_parser, reasoning_parser, case.tools, read_calls,
                              allowed, own_reasoning(tool_parser, case.reasoning_parser))
                problems += [f"{case.name}/reasoning={label}/calls={read_calls}: {p}" for p in found]
    assert not problems, "\n".join(problems[:20])
