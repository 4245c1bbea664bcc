"""Every fixture, non-streaming and in every chunking: all equal, all as expected, no leaks."""

from __future__ import annotations

import json

import pytest

from parsers import fold
from tests.fixture_cases import Case, load_cases
from tests.harness import check_stream_invariants, comparable, held, run_all_chunkings

CASES = load_cases()


def _normalise(message: dict) -> dict:
    calls = []
    for name, args, call_id in message["calls"]:
        try:
            args = json.dumps(json.loads(args), sort_keys=True)
        except ValueError:
            pass
        calls.append((name, args, call_id))
    return {**message, "calls": calls}


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_fixture(case: Case) -> None:
    whole, streams = run_all_chunkings(case.make_parser, case.output, case.markers(), case.truncated)
    expected = case.expected()
    assert _normalise(comparable(whole)) == expected
    allowed = case.output if case.markers_allowed else case.content + case.reasoning
    for name, events in streams.items():
        assert comparable(fold(events)) == comparable(whole), f"chunking {name} differs from one-shot parse"
        assert comparable(fold(held(events))) == comparable(whole), f"held-calls fold differs ({name})"
        problems = check_stream_invariants(events, case.markers(), allowed)
        assert not problems, f"chunking {name}: {problems}"


def test_fixture_files_cover_every_registered_detector() -> None:
    from parsers.registry import REASONING_PARSERS, TOOL_PARSERS

    covered_tools = {c.tool_parser for c in CASES}
    covered_reasoning = {c.reasoning_parser for c in CASES}
    assert set(TOOL_PARSERS) <= covered_tools, set(TOOL_PARSERS) - covered_tools
    assert set(REASONING_PARSERS) <= covered_reasoning, set(REASONING_PARSERS) - covered_reasoning
