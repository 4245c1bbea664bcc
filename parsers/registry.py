"""Parser names → detector classes.

Names follow SGLang's; vLLM's names are accepted as aliases where they differ. Detectors are named
by dotted path and imported on first use, so ``parsers`` never imports ``detectors`` statically.
"""

from __future__ import annotations

import importlib
from functools import cache
from typing import Any

# name -> "module:Class"
TOOL_PARSERS: dict[str, str] = {
    "qwen25": "detectors.tools.qwen25:Qwen25",
    "hermes": "detectors.tools.qwen25:Hermes",
    "llama3": "detectors.tools.llama3:Llama3",
    "mistral": "detectors.tools.mistral:Mistral",
}

TOOL_ALIASES: dict[str, str] = {
    "qwen": "qwen25",
    "llama3_json": "llama3",
    "llama4_json": "llama3",
}

REASONING_PARSERS: dict[str, str] = {
    "qwen3": "detectors.reasoning.think:Qwen3",
    "qwen3-thinking": "detectors.reasoning.think:Qwen3Thinking",
    "deepseek-r1": "detectors.reasoning.think:DeepSeekR1",
}

REASONING_ALIASES: dict[str, str] = {
    "deepseek_r1": "deepseek-r1",
    "qwen3_thinking": "qwen3-thinking",
}


class UnknownParserError(ValueError):
    """A parser name that is not registered; the message lists the known names."""

    def __init__(self, kind: str, name: str, known: list[str]) -> None:
        super().__init__(f"unknown {kind} parser {name!r}; known: {', '.join(known)}")
        self.kind, self.name, self.known = kind, name, known


def _norm(name: str) -> str:
    return name.strip().lower()


def tool_parser_names() -> list[str]:
    """Every accepted tool-call parser name (registry names and aliases), sorted."""
    return sorted({*TOOL_PARSERS, *TOOL_ALIASES})


def reasoning_parser_names() -> list[str]:
    return sorted({*REASONING_PARSERS, *REASONING_ALIASES})


def canonical_tool_parser(name: str) -> str:
    key = _norm(name)
    key = TOOL_ALIASES.get(key, key)
    if key not in TOOL_PARSERS:
        raise UnknownParserError("tool-call", name, tool_parser_names())
    return key


def canonical_reasoning_parser(name: str) -> str:
    key = _norm(name)
    key = REASONING_ALIASES.get(key, key)
    if key not in REASONING_PARSERS:
        raise UnknownParserError("reasoning", name, reasoning_parser_names())
    return key


@cache
def _load(path: str) -> Any:
    module, _, attr = path.partition(":")
    return getattr(importlib.import_module(module), attr)


def tool_detector_class(name: str) -> Any:
    return _load(TOOL_PARSERS[canonical_tool_parser(name)])


def reasoning_detector_class(name: str) -> Any:
    return _load(REASONING_PARSERS[canonical_reasoning_parser(name)])
