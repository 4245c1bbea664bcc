"""vLLM's ``--tool-call-parser`` names (0.12) are accepted by ``toolwire serve``, but three formats
toolwire has no parser for; the ones that are another name for a toolwire format read that format.

The names are vLLM's registered tool parsers (``vllm serve --help``, 0.12.0), copied as data.
"""

from __future__ import annotations

from typing import Any

import pytest

from parsers import FunctionCallParser, fold
from tests.harness import run_all_chunkings
from tests.test_sglang_names import serve_stops_at

VLLM_TOOL_PARSERS = (
    "deepseek_v3", "deepseek_v31", "ernie45", "glm45", "granite", "hermes", "hunyuan_a13b", "internlm", "jamba",
    "kimi_k2", "llama3_json", "llama4_json", "llama4_pythonic", "minimax_m2", "mistral", "olmo3", "openai",
    "phi4_mini_json", "pythonic", "qwen3_coder", "qwen3_xml", "seed_oss", "step3", "xlam",
)
#: vLLM formats toolwire does not read (MiniMax-M1, LongCat, Granite-20B-FC)
NOT_SUPPORTED = ("minimax", "longcat", "granite-20b-fc")

TOOLS: list[dict[str, Any]] = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}}]


@pytest.mark.parametrize("name", VLLM_TOOL_PARSERS)
def test_every_vllm_tool_parser_name_toolwire_reads_is_accepted(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert "--backend" in serve_stops_at("--tool-call-parser", name, capsys)


@pytest.mark.parametrize("name", NOT_SUPPORTED)
def test_the_formats_toolwire_lacks_are_refused_by_name(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    error = serve_stops_at("--tool-call-parser", name, capsys)
    assert "--backend" not in error and name in error


@pytest.mark.parametrize(("name", "text", "markers"), [
    ("ernie45", ('Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}\n'
                 "</tool_call>"), ["<tool_call>", "</tool_call>"]),
    ("jamba", ' <tool_calls>[\n    {"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}\n]</tool_calls>',
     ["<tool_calls>", "</tool_calls>"]),
    ("hy_v3", ("<tool_calls>\n<tool_call>get_weather<tool_sep>\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n"
               "<arg_key>days</arg_key>\n<arg_value>2</arg_value>\n</tool_call>\n</tool_calls>"),
     ["<tool_calls>", "<tool_call>", "<tool_sep>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>",
      "</tool_call>", "</tool_calls>"]),
])
def test_vllm_names_for_toolwire_formats_read_their_calls(name: str, text: str, markers: list[str]) -> None:
    whole, streams = run_all_chunkings(lambda: FunctionCallParser(TOOLS, name), text, markers)
    assert [(c.name, c.arguments) for c in whole.calls] == [("get_weather", '{"city": "Paris", "days": 2}')]
    assert "tool_call" not in whole.content and "Paris" not in whole.content
    for chunking, events in streams.items():
        got = fold(events)
        assert [(c.name, c.arguments) for c in got.calls] == [(c.name, c.arguments) for c in whole.calls], chunking
        assert got.content == whole.content, chunking
