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
    "qwen3_coder": "detectors.tools.qwen3_coder:Qwen3Coder",
    "glm45": "detectors.tools.glm:Glm45",
    "glm47": "detectors.tools.glm:Glm47",
    "kimi_k2": "detectors.tools.kimi_k2:KimiK2",
    "kimi_k3": "detectors.tools.kimi_k3:KimiK3",
    "deepseekv3": "detectors.tools.deepseek:DeepSeekV3",
    "deepseekv31": "detectors.tools.deepseek:DeepSeekV31",
    "deepseekv32": "detectors.tools.deepseek:DeepSeekV32",
    "deepseekv4": "detectors.tools.deepseek:DeepSeekV4",
    "deepseekv41": "detectors.tools.deepseek:DeepSeekV41",
    "minimax-m2": "detectors.tools.minimax:MinimaxM2",
    "minimax-m3": "detectors.tools.minimax_m3:MinimaxM3",
    # pythonic and object-notation formats
    "pythonic": "detectors.tools.pythonic:Pythonic",
    "lfm2": "detectors.tools.lfm2:Lfm2",
    "gemma4": "detectors.tools.gemma4:Gemma4",
    "functiongemma": "detectors.tools.functiongemma:FunctionGemma",
    # Harmony (gpt-oss) and the OpenChatML 2.2 envelope
    "gpt-oss": "detectors.tools.harmony:GptOss",
    "openchatml": "detectors.tools.openchatml:OpenChatML",
    "muse": "detectors.tools.muse:Muse",
    # more JSON and XML families
    "step3": "detectors.tools.step3:Step3",
    "interns1": "detectors.tools.interns1:InternS1",
    "gigachat3": "detectors.tools.gigachat3:GigaChat3",
    "gigachat35": "detectors.tools.gigachat3:GigaChat35",
    "mimo": "detectors.tools.mimo:Mimo",
    "minicpm5": "detectors.tools.minicpm5:MiniCpm5",
    "seed_oss": "detectors.tools.seed_oss:SeedOss",
    "hunyuan": "detectors.tools.hunyuan:Hunyuan",
    "apertus": "detectors.tools.apertus:Apertus",
    "cohere": "detectors.tools.cohere:Cohere",
    "granite": "detectors.tools.granite:Granite",
    "granite4": "detectors.tools.granite:Granite4",
    "xlam": "detectors.tools.xlam:Xlam",
    "phi4_mini_json": "detectors.tools.phi4_mini:Phi4MiniJson",
    "nemotron_nano_v2": "detectors.tools.nemotron_nano2:NemotronNanoV2",
    "functionary_v31": "detectors.tools.functionary:FunctionaryV31",
    "functionary_v32": "detectors.tools.functionary:FunctionaryV32",
    "firefunction": "detectors.tools.firefunction:FireFunction",
    "iquest_q1": "detectors.tools.iquest_q1:IQuestQ1",
    "dots": "detectors.tools.dots:Dots",
    "beam": "detectors.tools.beam:Beam",
    "inkling": "detectors.tools.inkling:Inkling",
    "trinity": "detectors.tools.trinity:Trinity",
    "k2_horizon": "detectors.tools.k2_horizon:K2Horizon",
}

TOOL_ALIASES: dict[str, str] = {
    "qwen": "qwen25",
    "llama3_json": "llama3",
    "llama4_json": "llama3",
    "qwen3_xml": "qwen3_coder",
    "step3p5": "qwen3_coder",
    "nanbeige": "qwen3_coder",
    "glm": "glm45",
    "glm4_moe": "glm45",
    "ling3": "glm45",
    "poolside_v1": "glm45",
    "glm47_moe": "glm47",
    "spark25": "glm47",
    "kimi-k2": "kimi_k2",
    "deepseek_v3": "deepseekv3",
    "deepseek_v31": "deepseekv31",
    "deepseek_v32": "deepseekv32",
    "deepseek_v4": "deepseekv4",
    "minimax_m2": "minimax-m2",
    "minimax_m3": "minimax-m3",
    "llama4_pythonic": "pythonic",
    "olmo3": "pythonic",
    "gpt_oss": "gpt-oss",
    "openai": "gpt-oss",
    "harmony": "gpt-oss",
    "internlm": "interns1",
    "gigachat": "gigachat3",
    "seed-oss": "seed_oss",
    "hunyuan_a13b": "hunyuan",
    "hy_v3": "hunyuan",
    "jamba": "hunyuan",
    "ernie45": "hermes",
    "apertus2509": "apertus",
    "command-r": "cohere",
    "command_r": "cohere",
    "cohere_command4": "cohere",
    "phi4_mini": "phi4_mini_json",
    "llama_nemotron_json": "nemotron_nano_v2",
    "functionary": "functionary_v32",
    "functionary_v3_1": "functionary_v31",
    "functionary_v3_2": "functionary_v32",
    "firefunction_v2": "firefunction",
}

REASONING_PARSERS: dict[str, str] = {
    "qwen3": "detectors.reasoning.think:Qwen3",
    "qwen3-thinking": "detectors.reasoning.think:Qwen3Thinking",
    "deepseek-r1": "detectors.reasoning.think:DeepSeekR1",
    "deepseek-v3": "detectors.reasoning.think:DeepSeekV3",
    "glm45": "detectors.reasoning.think:Glm45",
    "kimi": "detectors.reasoning.kimi:Kimi",
    "kimi_k2": "detectors.reasoning.think:KimiK2",
    "kimi_k3": "detectors.reasoning.kimi:KimiK3",
    "gpt-oss": "detectors.reasoning.harmony:GptOssReasoning",
    "muse": "detectors.reasoning.muse:Muse",
    "minimax": "detectors.reasoning.think:Minimax",
    "minimax-append-think": "detectors.reasoning.think:MinimaxAppendThink",
    "minimax-m3": "detectors.reasoning.minimax:MinimaxM3",
    "step3": "detectors.reasoning.think:Step3",
    "nemotron_3": "detectors.reasoning.think:Nemotron3",
    "interns1": "detectors.reasoning.think:InternS1",
    "mistral": "detectors.reasoning.mistral:Mistral",
    "gemma4": "detectors.reasoning.gemma4:Gemma4",
    "seed_oss": "detectors.reasoning.seed_oss:SeedOss",
    "granite": "detectors.reasoning.granite:Granite",
    "cohere": "detectors.reasoning.cohere:Cohere",
    "cohere_command4": "detectors.reasoning.cohere:CohereCommand4",
    "hunyuan": "detectors.reasoning.hunyuan:Hunyuan",
    "beam": "detectors.reasoning.harmony:BeamReasoning",
    "inkling": "detectors.reasoning.inkling:Inkling",
    "k2_horizon": "detectors.reasoning.k2_horizon:K2Horizon",
    "apertus2509": "detectors.reasoning.apertus:Apertus",
}

REASONING_ALIASES: dict[str, str] = {
    "nanbeige": "qwen3",
    "poolside_v1": "qwen3",
    "deepseek_r1": "deepseek-r1",
    "qwen3_thinking": "qwen3-thinking",
    "deepseek_v3": "deepseek-v3",
    "deepseek-v31": "deepseek-v3",
    "deepseek-v4": "deepseek-v3",
    "deepseek-v41": "deepseek-v3",
    "gigachat35": "deepseek-r1",
    "iquest_q1": "deepseek-r1",
    "dots": "qwen3",
    "mimo": "qwen3",
    "granite_thinking_parser": "qwen3",
    "step3p5": "step3",
    "glm4_moe": "glm45",
    "glm47": "glm45",
    "ling3": "glm45",
    "kimi-k2": "kimi_k2",
    "gpt_oss": "gpt-oss",
    "openai": "gpt-oss",
    "harmony": "gpt-oss",
    "minimax_m2": "minimax",
    "minimax_append_think": "minimax-append-think",
    "minimax_m3": "minimax-m3",
    "nano_v3": "nemotron_3",
    "nemotron3": "nemotron_3",
    "internlm": "interns1",
    "magistral": "mistral",
    "seed-oss": "seed_oss",
    "command-r": "cohere",
}


#: names that mean ``auto`` (learn the format from the chat template) for both kinds of parser.
#: SGLang's ``response_template`` parses with a grammar the checkpoint ships beside its chat
#: template (``tokenizer_config.json``'s ``response_template``); toolwire has no reader for that
#: grammar, and learns the same thing — how this checkpoint writes reasoning, content and calls —
#: from the chat template itself.
AUTO_ALIASES: frozenset[str] = frozenset({"response_template"})


def means_auto(name: str | None) -> bool:
    """Whether a configured parser name asks for ``auto`` (``auto`` itself or an ``AUTO_ALIASES`` name)."""
    return name is not None and (_norm(name) == "auto" or _norm(name) in AUTO_ALIASES)


def means_none(name: object) -> bool:
    """Whether a configured parser name asks for no parser at all: ``none`` (llama.cpp's
    ``reasoning_format: none`` — the model's text left as written)."""
    return isinstance(name, str) and _norm(name) == "none"


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


def tool_detector_class(name: str | type) -> Any:
    """The detector class for a registered name (a class — e.g. one built by ``auto`` from a
    chat template — is returned as is)."""
    if isinstance(name, type):
        return name
    return _load(TOOL_PARSERS[canonical_tool_parser(name)])


def reasoning_detector_class(name: str | type) -> Any:
    if isinstance(name, type):
        return name
    return _load(REASONING_PARSERS[canonical_reasoning_parser(name)])
