"""Score toolwire's FunctionCallParser against vLLM's own tool-parser test expectations.

``python -m bench.vllm_suite [--cases FILE] [--json OUT] [-v]`` reads the cases that
``bench/vllm_extract.py`` took from vLLM's tests (``bench/data/vllm_tool_parser_cases.json``, the vLLM
commit recorded inside), maps each vLLM parser name to toolwire's (``VLLM_TO_TOOLWIRE``), and runs
every case non-streaming and streamed in every chunking of the shared fixture harness (one chunk,
per character, seeded random splits). A case passes when every run meets vLLM's expectation: the
calls (name; arguments compared as parsed JSON, exactly or as vLLM's test compares them) and the
content (stripped; vLLM's ``None`` is empty content). Each failure carries a classification from
``KNOWN_DIFFERENCES`` when it is a deliberate difference or needs state toolwire has no way to know;
an unclassified failure is shown as ``unclassified`` (a bug until shown otherwise).

Not part of ``make test``: vLLM is not installed; only its test data is used.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from parsers import FunctionCallParser, fold
from parsers.registry import TOOL_ALIASES, TOOL_PARSERS
from tests.harness import chunkings, stream

CASES_FILE = Path(__file__).parent / "data" / "vllm_tool_parser_cases.json"

# vLLM parser (its test file's name) -> toolwire TOOL_PARSERS name; None: toolwire has no such format.
VLLM_TO_TOOLWIRE: dict[str, str | None] = {
    "apertus": "apertus", "deepseekv3": "deepseekv3", "deepseekv31": "deepseekv31",
    "deepseekv32": "deepseekv32", "deepseekv4": "deepseekv4", "ernie45_moe": "ernie45",
    "functiongemma": "functiongemma", "gemma4": "gemma4", "gigachat3": "gigachat3",
    "glm47_moe": "glm47", "glm4_moe": "glm45", "granite": "granite", "granite4": "granite4",
    "granite_20b_fc": None, "hermes": "hermes", "hunyuan_a13b": "hunyuan", "hy_v3": "hy_v3",
    "internlm2": "internlm", "jamba": "jamba", "kimi_k2": "kimi_k2", "lfm2": "lfm2",
    "llama3_json": "llama3", "llama4_pythonic": "pythonic", "longcat": None, "minimax": None,
    "minimax_m2": "minimax-m2", "mistral": "mistral", "olmo3": "olmo3", "openai": "gpt-oss",
    "phi4mini": "phi4_mini_json", "pythonic": "pythonic", "qwen3coder": "qwen3_coder",
    "qwen3xml": "qwen3_xml", "seed_oss": "seed_oss", "step3": "step3", "step3p5": "step3p5",
    "xlam": "xlam",
}

# Case id prefix -> (class, reason). Classes: "differs" (vLLM-specific behaviour toolwire
# deliberately does not copy) and "state" (the test needs state a text parser does not have).
_T = "tests/tool_parsers/"
_KEEP_TEXT = "toolwire keeps text written after or between calls as content; vLLM drops it"
KNOWN_DIFFERENCES: dict[str, tuple[str, str]] = {
    _T + "test_apertus_tool_parser.py::test_incomplete_tool_call":
        ("differs", ("a call list never closed is no call (README: a list's call is complete once the "
                    "separator after it arrives); vLLM repairs the list")),
    _T + "test_deepseekv31_tool_parser.py::test_extract_tool_calls_with_multiple_tools": ("differs", _KEEP_TEXT),
    _T + "test_glm4_moe_tool_parser.py::test_extract_tool_calls_mixed_content": ("differs", _KEEP_TEXT),
    _T + "test_hunyuan_a13b_tool_parser.py::test_hunyuan_a13b_tool_parser_extract": ("differs", _KEEP_TEXT),
    _T + "test_mistral_tool_parser.py::test_extract_tool_calls_pre_v11_tokenizer[trailing_data_after_json]":
        ("differs", _KEEP_TEXT),
    _T + "test_kimi_k2_tool_parser.py::test_invalid_json_still_extracted":
        ("differs", ("a call whose arguments are not valid JSON is malformed markup, passed through as "
                    "content (README); vLLM emits it as a call with invalid arguments")),
    _T + "test_kimi_k2_tool_parser.py::test_invalid_funcall_id_skipped":
        ("differs", ("`functions.invalid.0` (no `:index`) is read as the dotted name `invalid.0`; vLLM "
                    "drops the call")),
    _T + "test_kimi_k2_tool_parser.py::test_truncated_tool_call_no_end_marker":
        ("differs", ("a call cut before its end is never presented as a call (README, streaming "
                    "guarantees); vLLM's stream shows the cut call with partial arguments")),
    _T + "test_llama3_json_tool_parser.py::test_extract_tool_calls_simple":
        ("differs", ("a JSON object in the middle of prose is content; a Llama 3 call starts the answer or "
                    "follows <|python_tag|> (vLLM scans prose for JSON)")),
    _T + "test_llama3_json_tool_parser.py::test_extract_tool_calls_multiple_json_with_surrounding_text":
        ("differs", "a JSON object in the middle of prose is content (vLLM scans prose for JSON)"),
    _T + "test_llama3_json_tool_parser.py::test_extract_tool_calls_missing_parameters_and_arguments_key":
        ("differs", '{"name": "f"} alone is a call with no arguments; vLLM requires a parameters key'),
    _T + "test_mistral_tool_parser.py::test_extract_tool_calls_pre_v11_regex_fallback":
        ("differs", "no regex salvage of JSON after junk behind [TOOL_CALLS]: malformed markup is content"),
    _T + "test_mistral_tool_parser.py::test_extract_tool_calls_streaming_one_chunk[v11-":
        ("state", ("vLLM's v11 Mistral tokenizer drops the [ARGS] control token from the text "
                  "(`[TOOL_CALLS]f{…}`); toolwire reads the raw text with it (`[TOOL_CALLS]f[ARGS]{…}`)")),
    _T + "test_seed_oss_tool_parser.py::test_extract_tool_calls[tool_call_unlimited_thinking_budget]":
        ("state", ("the call quoted inside <seed:think> is reasoning: toolwire's reasoning parser takes "
                  "the think block before the tool parser sees it")),
    _T + "test_seed_oss_tool_parser.py::test_streaming_tool_calls[tool_call_unlimited_thinking_budget]":
        ("state", "as above: the reasoning parser runs first in toolwire's pipeline"),
}

Message = tuple[str, list[tuple[str, Any]]]


def toolwire_name(vllm_parser: str) -> str | None:
    name = VLLM_TO_TOOLWIRE.get(vllm_parser)
    if name is None:
        return None
    return name if name in TOOL_PARSERS or name in TOOL_ALIASES else None


def _message(events: list[Any]) -> Message:
    folded = fold(events)
    calls = []
    for call in folded.calls:
        try:
            arguments = json.loads(call.arguments) if call.arguments.strip() else {}
        except json.JSONDecodeError:
            arguments = call.arguments
        calls.append((call.name, arguments))
    return folded.content, calls


def runs(parser: str, tools: list[dict[str, Any]] | None, text: str) -> dict[str, Message]:
    """The message of every run: non-streaming (``parse_non_stream``) and each harness chunking."""
    def make() -> FunctionCallParser:
        return FunctionCallParser(tools, parser)

    out: dict[str, Message] = {}
    content, items = make().parse_non_stream(text)
    out["non-stream"] = (content, [(i.name or "", _loads(i.parameters)) for i in items])
    for chunking in chunkings(()):
        if chunking.name in ("markers", "inside-markers"):
            continue  # no marker list for vLLM's formats here; char and random splits cover them
        out[chunking.name] = _message(stream(make, chunking.split(text)))  # type: ignore[arg-type]
    return out


def _loads(arguments: str) -> Any:
    try:
        return json.loads(arguments) if arguments.strip() else {}
    except json.JSONDecodeError:
        return arguments


def check(expect: dict[str, Any], message: Message) -> str | None:  # noqa: C901
    """Why ``message`` misses vLLM's expectation, or None when it meets it."""
    content, calls = message
    if "called" in expect and bool(calls) != expect["called"]:
        return f"tools_called {bool(calls)} != {expect['called']}"
    if "count" in expect and len(calls) != expect["count"]:
        return f"{len(calls)} calls, expected {expect['count']}"
    if "min_count" in expect and len(calls) < expect["min_count"]:
        return f"{len(calls)} calls, expected at least {expect['min_count']}"
    mode = expect.get("args_mode", "exact")
    for i, want in enumerate(expect.get("calls", [])):
        if i >= len(calls):
            return f"call {i} missing"
        name, arguments = calls[i]
        if "name" in want and name != want["name"]:
            return f"call {i} name {name!r} != {want['name']!r}"
        if mode in ("exact", "given") and "arguments" in want and arguments != want["arguments"]:
            return f"call {i} arguments {json.dumps(arguments)[:160]} != {json.dumps(want['arguments'])[:160]}"
        if mode == "subset" and isinstance(arguments, dict):
            wrong = {k: v for k, v in want.get("arguments", {}).items() if arguments.get(k) != v}
            if wrong:
                return f"call {i} arguments {json.dumps(arguments)[:160]} lack {json.dumps(wrong)[:120]}"
    if mode == "empty" and calls and calls[0][1] not in ({}, ""):
        return f"arguments {calls[0][1]!r} not empty"
    if mode == "nonempty" and calls and not calls[0][1]:
        return "arguments empty"
    if "content" in expect:
        want_content = expect["content"] or ""
        if expect.get("content_exact"):
            if content != want_content and not (calls == [] and content.strip() == want_content.strip()):
                return f"content {content[:120]!r} != {want_content[:120]!r}"
        elif content.strip() != want_content.strip():
            return f"content {content.strip()[:120]!r} != {want_content.strip()[:120]!r}"
    return None


def classify(case_id: str) -> tuple[str, str]:
    for prefix, verdict in KNOWN_DIFFERENCES.items():
        if case_id.startswith(prefix):
            return verdict
    return ("unclassified", "")


def score(data: dict[str, Any], run: Callable[[str, list[dict[str, Any]] | None, str], dict[str, Message]] = runs,
          ) -> dict[str, Any]:
    table: dict[str, Counter[str]] = defaultdict(Counter)
    failures: list[dict[str, Any]] = []
    for case in data["cases"]:
        row = table[case["parser"]]
        row["cases"] += 1
        parser = toolwire_name(case["parser"])
        if parser is None:
            row["skipped"] += 1
            continue
        reasons: dict[str, str] = {}
        try:
            for mode, message in run(parser, case.get("tools"), case["model_output"]).items():
                reason = check(case["expect"], message)
                if reason is not None:
                    reasons[mode] = reason
        except Exception as exc:  # noqa: BLE001 - a crash is a failure to report, not to stop on
            reasons["crash"] = f"{type(exc).__name__}: {exc}"
        if reasons:
            row["failed"] += 1
            klass, why = classify(case["id"])
            failures.append({"id": case["id"], "parser": case["parser"], "toolwire": parser, "class": klass,
                             "why": why, "vllm_xfail": case.get("vllm_xfail"), "reasons": reasons,
                             "model_output": case["model_output"]})
        else:
            row["passed"] += 1
    return {"vllm_commit": data["vllm_commit"], "table": {k: dict(v) for k, v in sorted(table.items())},
            "failures": failures}


def report(result: dict[str, Any], data: dict[str, Any], verbose: bool) -> str:
    lines = [f"vLLM tool-parser suite at {result['vllm_commit']}", "",
             f"{'vLLM parser':<16} {'toolwire':<15} {'cases':>5} {'pass':>5} {'fail':>5} {'skip':>5}"]
    passed = scoreable = 0
    for parser, row in result["table"].items():
        lines.append(f"{parser:<16} {toolwire_name(parser) or '-':<15} {row.get('cases', 0):>5} "
                     f"{row.get('passed', 0):>5} {row.get('failed', 0):>5} {row.get('skipped', 0):>5}")
        passed += row.get("passed", 0)
        scoreable += row.get("passed", 0) + row.get("failed", 0)
    lines += ["", f"overall: {passed} of {scoreable} scoreable cases pass"]
    classes = Counter(f["class"] for f in result["failures"])
    lines.append("failures by class: " + ", ".join(f"{k} {v}" for k, v in sorted(classes.items())))
    skipped = Counter[str]()
    for reasons in data.get("skipped", {}).values():
        skipped.update(reasons)
    unmapped = sum(row.get("skipped", 0) for row in result["table"].values())
    lines.append(f"cases skipped, no toolwire format for the vLLM parser: {unmapped}")
    lines.append("tests not extracted from vLLM's files, by reason:")
    lines += [f"  {n:>4}  {r}" for r, n in skipped.most_common()]
    lines.append("")
    for failure in result["failures"]:
        first = next(iter(failure["reasons"].items()))
        lines.append(f"FAIL [{failure['class']}] {failure['id']} ({failure['toolwire']}): {first[0]}: {first[1]}"
                     + (f" — {failure['why']}" if failure["why"] else ""))
        if verbose:
            lines.append(f"    input: {failure['model_output']!r}"[:600])
            lines += [f"    {mode}: {why}" for mode, why in failure["reasons"].items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=Path, default=CASES_FILE)
    ap.add_argument("--json", type=Path, help="write the full result as JSON here")
    ap.add_argument("-v", "--verbose", action="store_true", help="show each failure's input and every mode")
    args = ap.parse_args(argv)
    data = json.loads(args.cases.read_text())
    result = score(data)
    print(report(result, data, args.verbose))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
