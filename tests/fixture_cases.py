"""Loading the fixture files in ``tests/fixtures/*.toml`` (data, many cases per format)."""

from __future__ import annotations

import json
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from parsers import ResponseParser, build_response_parser
from parsers.registry import means_none, reasoning_detector_class, tool_detector_class

FIXTURES = Path(__file__).parent / "fixtures"

DEFAULT_TOOLS: list[dict[str, Any]] = [
    {"type": "function", "function": {"name": name, "parameters": {"type": "object", "properties": props}}}
    for name, props in {
        "get_weather": {"city": {"type": "string"}, "unit": {"type": "string"}, "days": {"type": "integer"}},
        "search": {"query": {"type": "string"}, "limit": {"type": "integer"}},
        "add": {"a": {"type": "number"}, "b": {"type": "number"}},
        "echo": {"text": {"type": "string"}},
        "get_time": {},
        "write_file": {"path": {"type": "string"}, "content": {"type": "string"}},
    }.items()
]


@dataclass
class Case:
    file: str
    name: str
    output: str
    tool_parser: str | None
    reasoning_parser: str | None
    prompt: str | None = None
    truncated: bool = False
    content: str = ""
    reasoning: str = ""
    calls: list[tuple[str, str, str | None]] = field(default_factory=list)
    markers_allowed: bool = False  # malformed output passed through: markers may appear in content
    # tools offered (OpenAI format); a file sets them with top-level ``tools_json = '''[...]'''``,
    # a case overrides with its own ``tools_json``
    tools: list[dict[str, Any]] = field(default_factory=lambda: DEFAULT_TOOLS)

    @property
    def id(self) -> str:
        return f"{self.file}::{self.name}"

    def markers(self) -> tuple[str, ...]:
        """The formats' markers and end-of-turn tokens: none may reach the message (leak check),
        and the harness splits the output at each (chunkings)."""
        found: list[str] = []
        if self.tool_parser and not means_none(self.tool_parser):
            tools = tool_detector_class(self.tool_parser)
            found += [*tools.markers, *tools.end_tokens]
        if self.reasoning_parser and not means_none(self.reasoning_parser):
            reasoning = reasoning_detector_class(self.reasoning_parser)
            found += [*reasoning.markers(), *reasoning.end_tokens]
        return tuple(dict.fromkeys(m for m in found if m))

    def make_parser(self) -> ResponseParser:
        return build_response_parser(self.tools, self.tool_parser, self.reasoning_parser, self.prompt)

    def expected(self) -> dict[str, Any]:
        return {
            "content": self.content,
            "reasoning": self.reasoning,
            "calls": [(name, _canonical(args), call_id) for name, args, call_id in self.calls],
        }


def _canonical(arguments: str) -> str:
    """Expected arguments are compared as parsed JSON (whitespace and key order free)."""
    return json.dumps(json.loads(arguments), sort_keys=True)


def load_cases() -> list[Case]:
    cases: list[Case] = []
    for path in sorted(FIXTURES.glob("*.toml")):
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        file_tools = json.loads(data["tools_json"]) if "tools_json" in data else DEFAULT_TOOLS
        for raw in data.get("case", []):
            calls = [(c["name"], c.get("arguments", "{}"), c.get("id")) for c in raw.get("calls", [])]
            cases.append(
                Case(
                    file=path.stem,
                    name=raw["name"],
                    output=raw["output"],
                    tool_parser=raw.get("tool_parser", data.get("tool_parser")),
                    reasoning_parser=raw.get("reasoning_parser", data.get("reasoning_parser")),
                    prompt=raw.get("prompt", data.get("prompt")),
                    truncated=raw.get("truncated", False),
                    content=raw.get("content", ""),
                    reasoning=raw.get("reasoning", ""),
                    calls=calls,
                    markers_allowed=raw.get("markers_allowed", False),
                    tools=json.loads(raw["tools_json"]) if "tools_json" in raw else file_tools,
                )
            )
    return cases
