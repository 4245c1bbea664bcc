"""Every parser name SGLang 0.5.23 registers is accepted by ``toolwire serve`` (issue #17).

The lists are SGLang's ``TOOL_CALL_PARSER_NAMES`` and ``REASONING_PARSER_NAMES`` (sglang 0.5.23,
``srt/function_call/parser_names.py`` and ``srt/parser/reasoning_parser_names.py``), copied as data.
``toolwire serve`` is run in-process without a backend: it gets past parser validation (the flag is
known) and stops at the missing ``--backend`` — a name it did not know would stop it earlier.
"""

from __future__ import annotations

import pytest

from app.cli import main
from parsers.registry import reasoning_parser_names, tool_parser_names

SGLANG_TOOL_PARSERS = (
    "apertus2509", "beam", "cohere_command4", "deepseekv3", "deepseekv31", "deepseekv32", "deepseekv4",
    "deepseekv41", "dots", "glm", "glm45", "glm47", "gpt-oss", "k2_horizon", "kimi_k2", "kimi_k3", "lfm2",
    "ling3", "llama3", "mimo", "minicpm5", "mistral", "muse", "poolside_v1", "pythonic", "qwen", "qwen25",
    "qwen3_coder", "spark25", "step3", "step3p5", "minimax-m2", "minimax-m3", "nanbeige", "trinity",
    "interns1", "hermes", "hunyuan", "gigachat3", "gigachat35", "gemma4", "inkling", "iquest_q1",
    "response_template",
)
SGLANG_REASONING_PARSERS = (
    "apertus2509", "beam", "deepseek-r1", "deepseek-v3", "deepseek-v4", "deepseek-v41", "dots", "glm45", "ling3",
    "hunyuan", "gpt-oss", "k2_horizon", "kimi", "kimi_k2", "kimi_k3", "mimo", "muse", "poolside_v1", "qwen3",
    "qwen3-thinking", "minimax", "minimax-append-think", "minimax-m3", "nanbeige", "step3", "step3p5", "mistral",
    "nemotron_3", "granite_thinking_parser", "interns1", "gemma4", "inkling", "iquest_q1", "cohere_command4",
    "gigachat35", "response_template",
)


def serve_stops_at(flag: str, name: str, capsys: pytest.CaptureFixture[str]) -> str:
    assert main(["serve", flag, name]) == 2
    return capsys.readouterr().err


@pytest.mark.parametrize("name", SGLANG_TOOL_PARSERS)
def test_every_sglang_tool_parser_name_is_accepted(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert "--backend" in serve_stops_at("--tool-call-parser", name, capsys)


@pytest.mark.parametrize("name", SGLANG_REASONING_PARSERS)
def test_every_sglang_reasoning_parser_name_is_accepted(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert "--backend" in serve_stops_at("--reasoning-parser", name, capsys)


def test_an_unknown_name_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    error = serve_stops_at("--tool-call-parser", "no-such-format", capsys)
    assert "--backend" not in error and "no-such-format" in error


def test_the_names_are_listed() -> None:
    listed = set(tool_parser_names()) | {"auto", "response_template"}
    assert not set(SGLANG_TOOL_PARSERS) - listed
    assert not set(SGLANG_REASONING_PARSERS) - (set(reasoning_parser_names()) | {"auto", "response_template"})
