"""Benchmark inputs: model outputs per detector family, and the chunk sequences they stream in.

Every case is one model output with one tool call ``write_file(path, content)`` whose ``content``
is a long string argument of code-like text (quotes, backslashes, newlines, tabs, ``<``/``{``,
non-ASCII), written in the family's own wire format::

    qwen25:  <tool_call>\\n{"name": "write_file", "arguments": {"path": "…", "content": "…64 KB…"}}\\n</tool_call>
    glm45:   <tool_call>write_file\\n<arg_key>path</arg_key>\\n<arg_value>…</arg_value>\\n…</tool_call>
    gpt-oss: <|channel|>analysis<|message|>…<|end|><|start|>assistant<|channel|>commentary to=functions.write_file …

Outputs are rendered with the detector's ``wire`` (``parsers.wire.WireFormat.render``) where it has
one; gpt-oss (Harmony) uses a hand-written template (see tests/fixtures/gpt_oss.toml).

Chunking imitates a tokenizer: every marker of the format is one chunk (special tokens arrive
whole), the text between markers is cut into 4-character chunks. The same chunk lists are fed to
toolwire and to SGLang.

This module needs only the standard library and ``parsers`` (it also runs inside the SGLang venv).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from parsers.registry import reasoning_detector_class, tool_detector_class

SIZES_KB = (1, 4, 16, 64)
CHUNK = 4
TOOL_NAME = "write_file"
TOOLS: list[dict[str, Any]] = [{
    "type": "function",
    "function": {
        "name": TOOL_NAME,
        "description": "Write a text file.",
        "parameters": {
            "type": "object",
            "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
            "required": ["path", "content"],
        },
    },
}]

_SNIPPET = '''def render_{n}(rows: list[dict], sep: str = "\\t") -> str:
    """Render rows — «naïve» café façade, 日本語のテキスト, Ελληνικά, emoji 🚀✓."""
    out = []
    for i, row in enumerate(rows):
        if i < {n} and row.get("name") != 'O\\'Brien':
            path = "C:\\\\Users\\\\data\\\\file_{n}.txt"
            out.append(f"{{i}}: {{row['name']!r}} -> {{path}} \\"quoted\\" {{{{braces}}}}")
    pattern = re.compile(r"\\d+\\s*[<>]=?\\s*\\w+")  # regex with backslashes
    return sep.join(out) + "\\n"

'''


def code_text(size_bytes: int) -> str:
    """Deterministic code-like text of exactly ``size_bytes`` UTF-8 bytes (cut at a character)."""
    parts: list[str] = []
    total = 0
    n = 0
    while total < size_bytes:
        piece = _SNIPPET.format(n=n)
        parts.append(piece)
        total += len(piece.encode())
        n += 1
    data = "".join(parts).encode()[:size_bytes]
    return data.decode("utf-8", "ignore")


def prose_text(size_bytes: int) -> str:
    """Reasoning-like text (sentences, some code and non-ASCII) of about ``size_bytes`` bytes."""
    sentence = ("Let me think about the file layout — the user wants `render()` to handle ü, é and 日本語; "
                "a path like C:\\tmp\\x and a quote \" must survive. Next step {n}.\n")
    parts: list[str] = []
    total, n = 0, 0
    while total < size_bytes:
        piece = sentence.format(n=n)
        parts.append(piece)
        total += len(piece.encode())
        n += 1
    return "".join(parts).encode()[:size_bytes].decode("utf-8", "ignore")


@dataclass(frozen=True)
class Family:
    """One detector family: toolwire's and SGLang's parser names, how its output is built."""

    name: str
    tool_parser: str | None  # toolwire registry name (None: reasoning only)
    reasoning_parser: str | None  # chained for the reasoning case
    kind: str  # "json" | "xml" | "reasoning"
    sglang_tool: str | None
    sglang_reasoning: str | None
    think: tuple[str, str] = ("<think>\n", "\n</think>\n\n")  # how a reasoning block is written
    #: SGLang serves this format with its reasoning parser always chained in front (gpt-oss)
    sglang_always_reasoning: bool = False


FAMILIES: tuple[Family, ...] = (
    Family("qwen25", "qwen25", "qwen3", "json", "qwen25", "qwen3"),
    Family("hermes", "hermes", "qwen3", "json", "hermes", "qwen3"),
    Family("llama3", "llama3", "qwen3", "json", "llama3", "qwen3"),
    Family("mistral", "mistral", "mistral", "json", "mistral", "mistral", think=("[THINK]", "[/THINK]")),
    Family("kimi_k2", "kimi_k2", "kimi_k2", "json", "kimi_k2", "kimi_k2"),
    Family("glm45", "glm45", "glm45", "xml", "glm45", "glm45"),
    Family("deepseekv31", "deepseekv31", "deepseek-v3", "json", "deepseekv31", "deepseek-r1"),
    Family("qwen3_coder", "qwen3_coder", "qwen3", "xml", "qwen3_coder", "qwen3"),
    Family("gpt-oss", "gpt-oss", None, "json", "gpt-oss", "gpt-oss", sglang_always_reasoning=True),
    Family("qwen3-reasoning", None, "qwen3", "reasoning", None, "qwen3"),
)


@dataclass
class Case:
    family: Family
    label: str  # "16 KB" | "reasoning 64 KB"
    size_kb: int
    output: str
    chunks: list[str]
    expect_args: dict[str, Any] | None  # the call's arguments (None: no call)
    expect_reasoning: str | None
    with_reasoning: bool  # chain the family's reasoning parser
    meta: dict[str, Any] = field(default_factory=dict)


def _harmony(arguments: dict[str, Any], reasoning: str = "Need to write the file.") -> str:
    return ("<|channel|>analysis<|message|>" + reasoning + "<|end|>"
            "<|start|>assistant<|channel|>commentary to=functions." + TOOL_NAME + " <|constrain|>json<|message|>"
            + json.dumps(arguments, ensure_ascii=False) + "<|call|>")


def render_call(family: Family, arguments: dict[str, Any]) -> str:
    """The family's model output for one ``write_file`` call."""
    if family.tool_parser == "gpt-oss":
        return _harmony(arguments)
    assert family.tool_parser is not None
    wire = tool_detector_class(family.tool_parser).wire
    assert wire is not None, family.name
    return wire.render([(TOOL_NAME, arguments)])


def markers_of(family: Family) -> tuple[str, ...]:
    found: list[str] = []
    if family.tool_parser:
        found += tool_detector_class(family.tool_parser).markers
    if family.reasoning_parser:
        found += reasoning_detector_class(family.reasoning_parser).markers()
    if family.tool_parser == "gpt-oss":
        found += ["<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>", "<|call|>", "<|return|>"]
    return tuple(sorted({m for m in found if m}, key=len, reverse=True))


def tokenize(text: str, markers: tuple[str, ...], size: int = CHUNK) -> list[str]:
    """Markers whole, other text in ``size``-character chunks."""
    if not markers:
        return [text[i : i + size] for i in range(0, len(text), size)]
    pattern = re.compile("|".join(re.escape(m) for m in markers))
    chunks: list[str] = []
    pos = 0
    for match in pattern.finditer(text):
        plain = text[pos : match.start()]
        chunks.extend(plain[i : i + size] for i in range(0, len(plain), size))
        chunks.append(match.group())
        pos = match.end()
    plain = text[pos:]
    chunks.extend(plain[i : i + size] for i in range(0, len(plain), size))
    return chunks


def argument_case(family: Family, size_kb: int) -> Case:
    args = {"path": "src/render.py", "content": code_text(size_kb * 1024)}
    output = render_call(family, args)
    return Case(family, f"{size_kb} KB", size_kb, output, tokenize(output, markers_of(family)), args, None, False)


def reasoning_case(family: Family, size_kb: int) -> Case:
    """A ``size_kb`` reasoning block, then (for tool families) a short call."""
    reasoning = prose_text(size_kb * 1024)
    short = {"path": "notes.txt", "content": "done"}
    if family.tool_parser == "gpt-oss":
        output = _harmony(short, reasoning)
        args: dict[str, Any] | None = short
    elif family.tool_parser is None:
        output = family.think[0] + reasoning + family.think[1] + "The answer is 42."
        args = None
    else:
        output = family.think[0] + reasoning + family.think[1] + render_call(family, short)
        args = short
    return Case(family, f"reasoning {size_kb} KB", size_kb, output, tokenize(output, markers_of(family)), args,
                reasoning.strip(), True)


def cases_for(family: Family, sizes: tuple[int, ...] = SIZES_KB) -> list[Case]:
    """The argument-size series (or, for a reasoning-only family, the reasoning-size series) and
    one 64 KB reasoning case."""
    if family.tool_parser is None:
        return [reasoning_case(family, kb) for kb in sizes]
    return [argument_case(family, kb) for kb in sizes] + [reasoning_case(family, 64)]


# ---------------------------------------------------------------------- toolwire side


def toolwire_parser(case: Case) -> Any:
    from parsers import build_response_parser

    fam = case.family
    return build_response_parser(TOOLS if fam.tool_parser else None, fam.tool_parser,
                                 fam.reasoning_parser if case.with_reasoning else None)


class Collected:
    """A run's events, taken in as they arrive and kept as text only — the way the proxy consumes
    them (encode, send, drop): no event object outlives the chunk it came with, so the garbage
    collector's work does not grow with the output as it would if the run kept every event.
    Calls count once they end ``ok`` (as ``parsers.fold`` counts them)."""

    __slots__ = ("_args", "_name", "calls", "reasoning")

    def __init__(self) -> None:
        self.reasoning: list[str] = []
        self.calls: list[tuple[str, str]] = []  # (name, arguments) of every complete call
        self._name: str | None = None
        self._args: list[str] = []

    def add(self, events: list[Any]) -> None:
        from parsers.events import CallArgs, CallEnd, CallStart, Reasoning

        for event in events:
            kind = type(event)
            if kind is CallArgs:
                self._args.append(event.text)
            elif kind is Reasoning:
                self.reasoning.append(event.text)
            elif kind is CallStart:
                self._name, self._args = event.name, []
            elif kind is CallEnd:
                if event.ok and self._name is not None:
                    self.calls.append((self._name, "".join(self._args)))
                self._name, self._args = None, []


def toolwire_check(case: Case, got: Collected) -> str | None:
    """``None`` if the parse is right, else what is wrong."""
    if case.expect_args is not None:
        if len(got.calls) != 1:
            return f"{len(got.calls)} calls"
        name, arguments = got.calls[0]
        if name != TOOL_NAME:
            return f"name {name!r}"
        try:
            if json.loads(arguments) != case.expect_args:
                return "arguments differ"
        except ValueError:
            return "arguments are not JSON"
    if case.expect_reasoning is not None and "".join(got.reasoning).strip() != case.expect_reasoning:
        return "reasoning differs"
    return None
