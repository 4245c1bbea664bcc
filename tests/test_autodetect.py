"""``auto`` parsers learned from chat templates: over all 71 templates, every rendered call and
every rendered reasoning block parses back through the parsers ``auto`` picks (in every chunking);
the pick table in ``docs/auto-parsers.md`` is current; the analysis never crashes; the generic
detectors keep the streaming contract; ``inspect-template`` and the runtime use it all."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.templates.autodetect import Report, analyse_template, analyse_template_file, choose_parsers
from app.templates.autodetect.analysis import ReasoningFormat, TemplateAnalysis
from app.templates.autodetect.diff import balanced, common_prefix, common_suffix, pieces, split_between
from app.templates.autodetect.render import CONTENT, ONE_CALL, REASONING, TOOLS, TWO_CALLS, WITH_REASONING, Turn
from app.templates.autodetect.select import check_turns, parse, reasoning_samples
from app.templates.autodetect.table import render_doc
from app.templates.chat_template import ChatTemplate
from parsers import fold
from parsers.registry import (
    canonical_reasoning_parser,
    canonical_tool_parser,
    reasoning_detector_class,
    tool_detector_class,
)
from parsers.response import build_response_parser
from tests.harness import check_stream_invariants, comparable, run_all_chunkings

ROOT = Path(__file__).resolve().parents[1]
TEMPLATES = Path(__file__).parent / "data" / "templates"
NAMES = sorted(p.name for p in TEMPLATES.glob("*.jinja"))
NO_TOOL_SUPPORT = {"HuggingFaceTB-SmolLM3-3B.jinja", "google-gemma-2-2b-it.jinja", "llama-cpp-rwkv-world.jinja",
                   "microsoft-Phi-3.5-mini-instruct.jinja"}
# what the model writes where its template never renders calls (the known exceptions)
MODEL_WRITES = {
    "kimi_k2": '<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>'
               '{"city": "VAL_ALPHA"}<|tool_call_end|><|tool_calls_section_end|>',
    "lfm2": '<|tool_call_start|>[get_weather(city="VAL_ALPHA")]<|tool_call_end|>',
    "granite": '<|tool_call|>[{"name": "get_weather", "arguments": {"city": "VAL_ALPHA"}}]',
}


@cache
def report(name: str) -> Report:
    return analyse_template(ChatTemplate((TEMPLATES / name).read_text(encoding="utf-8"), name=name))


def test_templates_are_all_here() -> None:
    assert len(NAMES) == 71


def test_pick_table_is_current() -> None:
    expected = render_doc(TEMPLATES)
    actual = (ROOT / "docs" / "auto-parsers.md").read_text(encoding="utf-8")
    assert actual == expected, "docs/auto-parsers.md is stale: run `.venv/bin/python -m app.templates.autodetect.table " \
                               "> docs/auto-parsers.md`"


# ------------------------------------------------------------------------------------- round trips


def _markers(tool: Any, reasoning: Any) -> tuple[str, ...]:
    found: list[str] = []
    if tool:
        found += tool_detector_class(tool).markers
    if reasoning:
        found += reasoning_detector_class(reasoning).markers()
    return tuple(dict.fromkeys(m for m in found if m.strip()))


def _every_chunking_agrees(output: str, prompt: str | None, tool: Any, reasoning: Any) -> dict[str, Any]:
    """Parse ``output`` in every chunking: all equal to the one-shot parse, contract kept."""
    markers = _markers(tool, reasoning)
    whole, streams = run_all_chunkings(lambda: build_response_parser(TOOLS, tool, reasoning, prompt), output, markers)
    for chunking, events in streams.items():
        assert comparable(fold(events)) == comparable(whole), f"chunking {chunking} differs"
        # markup the parsers leave as content (an end-of-turn token) is not a leak of theirs
        problems = check_stream_invariants(events, markers, whole.content + whole.reasoning)
        assert not problems, f"chunking {chunking}: {problems}"
    return comparable(whole)


@pytest.mark.parametrize("name", NAMES)
def test_rendered_tool_calls_parse_back(name: str) -> None:
    rep = report(name)
    analysis = rep.analysis
    if name in NO_TOOL_SUPPORT:
        assert rep.tools.parser is None and not analysis.calls_rendered
        assert "no tool support" in rep.tools.why
        return
    assert rep.tools.parser is not None, rep.tools.why
    if not analysis.calls_rendered:  # a known exception: check what the model itself writes
        assert rep.tools.kind == "known"
        prompt = analysis.renderer.prompt()
        got = _every_chunking_agrees(MODEL_WRITES[rep.tools.parser], prompt, rep.tools.parser, rep.reasoning.parser)
        assert [(n, json.loads(a)) for n, a, _ in got["calls"]] == [("get_weather", {"city": "VAL_ALPHA"})]
        return
    assert ONE_CALL.label in analysis.turns
    turns = list(analysis.turns.values())
    checks = check_turns(turns, rep.tools.parser, rep.reasoning.parser)
    assert all(c.ok for c in checks), [c for c in checks if not c.ok]
    for turn in turns:
        got = _every_chunking_agrees(turn.output, turn.prompt, rep.tools.parser, rep.reasoning.parser)
        assert [(n, json.loads(a)) for n, a, _ in got["calls"]] == [(c.name, dict(c.arguments)) for c in turn.variant.calls]


def _registered_reasoning_sample(analysis: TemplateAnalysis, name: str) -> list[Turn]:
    """For a known exception naming a registered parser: an output in that parser's own markers."""
    cls = reasoning_detector_class(name)
    prompt = analysis.renderer.prompt() or ""
    start = cls.start[0] if cls.start else ""
    text = f"{start}{REASONING}{cls.ends()[0]}{CONTENT}"
    return [Turn(WITH_REASONING, "default", prompt, prompt + text, text)]


@pytest.mark.parametrize("name", NAMES)
def test_rendered_reasoning_parses_back(name: str) -> None:
    rep = report(name)
    if rep.reasoning.parser is None:
        assert rep.analysis.reasoning is None or rep.reasoning.kind == "none"
        assert REASONING not in "".join(t.output for t in rep.analysis.turns.values())
        return
    if isinstance(rep.reasoning.parser, str) and rep.reasoning.kind == "known":
        samples = reasoning_samples(rep.analysis) or _registered_reasoning_sample(rep.analysis, rep.reasoning.parser)
    elif rep.reasoning.kind == "known":
        fmt = next(k.reasoning for k in rep.known if isinstance(k.reasoning, ReasoningFormat))
        prompt = rep.analysis.renderer.prompt() or ""
        text = f"{REASONING}\n{fmt.end}\n{CONTENT}\n[END FINAL RESPONSE]"
        samples = [Turn(WITH_REASONING, "default", prompt, prompt + text, text)]
    else:
        samples = reasoning_samples(rep.analysis)
    assert samples
    # through the same chain the server runs: the tool parser sees what reasoning leaves
    checks = check_turns(samples, rep.tools.parser, rep.reasoning.parser)
    assert all(c.ok for c in checks), [c for c in checks if not c.ok]
    for sample in samples:
        got = _every_chunking_agrees(sample.output, sample.prompt, rep.tools.parser, rep.reasoning.parser)
        assert got["reasoning"].strip() == REASONING


def test_summary_of_picks() -> None:
    kinds = {name: (report(name).reasoning.kind, report(name).tools.kind) for name in NAMES}
    tools = [k for _, k in kinds.values()]
    assert tools.count("registered") >= 50
    assert tools.count("none") == len(NO_TOOL_SUPPORT)
    assert {report(n).tools.label for n in ("Qwen-Qwen3-0.6B.jinja", "Qwen-Qwen2.5-7B-Instruct.jinja")} == {"qwen25"}
    assert report("Qwen3-Coder.jinja").tools.parser == "qwen3_coder"
    assert report("Qwen3.5-4B.jinja").tools.parser == "qwen3_coder"
    assert report("GLM-4.7-Flash.jinja").tools.parser == "glm47"  # it writes calls without newlines
    assert report("GLM-4.6.jinja").tools.parser == "glm45"
    assert report("deepseek-ai-DeepSeek-V3.1.jinja").tools.parser == "deepseekv31"
    assert report("Qwen-Qwen3-0.6B.jinja").reasoning.parser == "qwen3"
    assert report("MiniMax-M2.jinja").reasoning.parser == "minimax"  # the tool parser's family wins the tie
    assert report("openai-gpt-oss-120b.jinja").tools.parser == "gpt-oss"
    assert (report("muse-glimmer.jinja").reasoning.parser, report("muse-glimmer.jinja").tools.parser) == \
        ("muse", "muse")


@pytest.mark.parametrize(("name", "tools", "reasoning"), [
    ("inclusionai-ling-3.0-flash.jinja", "ling3", "ling3"),
    ("Spark2.5.jinja", "spark25", None),
    ("poolside-Laguna-XS.2.jinja", "poolside_v1", None),
    ("poolside-Laguna-XS-2.1.jinja", "poolside_v1", None),
    ("Apertus-8B-Instruct.jinja", "apertus2509", "apertus2509"),
    # Laguna-S-2.1 writes the compact spelling: glm47, which reads what poolside_v1 (glm45) reads
])
def test_sglang_alias_templates_pick_the_same_detector(name: str, tools: str, reasoning: str | None) -> None:
    rep = report(name)
    assert rep.tools.parser == canonical_tool_parser(tools)
    if reasoning is not None:
        assert rep.reasoning.parser == canonical_reasoning_parser(reasoning)


def test_apertus_auto_reads_calls_inside_its_reasoning() -> None:
    # the template renders <|inner_prefix|> only from block content: a known exception picks apertus2509
    rep = report("Apertus-8B-Instruct.jinja")
    assert (rep.reasoning.parser, rep.tools.parser) == ("apertus2509", "apertus")
    out = '<|inner_prefix|>Need it.<|tools_prefix|>[{"get_weather": {"city": "Bern"}}]<|tools_suffix|>'
    got = _every_chunking_agrees(out, rep.analysis.renderer.prompt(), rep.tools.parser, rep.reasoning.parser)
    assert got["reasoning"] == "Need it."
    assert [(n, json.loads(a)) for n, a, _ in got["calls"]] == [("get_weather", {"city": "Bern"})]


# the shape of K2 Horizon's template (not in tests/data/templates: it needs a custom validate_tools global)
K2_STUB = (
    "{%- for m in messages %}<|ifm|im_start|>{{ m.role }}\n{{ m.content or '' }}"
    "{%- if m.tool_calls %}<ifm|tool_calls>\n{% for c in m.tool_calls %}<ifm|tool_call>{{ c.function.name }}\n"
    "{% for k, v in c.function.arguments.items() %}<ifm|arg_key>{{ k }}</ifm|arg_key>\n"
    "<ifm|arg_value>{{ v }}</ifm|arg_value>\n{% endfor %}</ifm|tool_call>\n{% endfor %}</ifm|tool_calls>{% endif %}"
    "<|ifm|im_end|>{% endfor %}{% if add_generation_prompt %}<|ifm|im_start|>assistant\n<ifm|think>\n{% endif %}"
)


def test_k2_horizon_auto() -> None:
    rep = analyse_template(ChatTemplate(K2_STUB))
    assert (rep.reasoning.parser, rep.tools.parser) == ("k2_horizon", "k2_horizon")
    assert [k.name for k in rep.known] == ["k2-horizon"]
    out = ("Weather.\n</ifm|think>\n<ifm|tool_calls>\n<ifm|tool_call>get_weather\n<ifm|arg_key>city</ifm|arg_key>\n"
           "<ifm|arg_value>Seoul</ifm|arg_value>\n</ifm|tool_call>\n</ifm|tool_calls>")
    got = _every_chunking_agrees(out, rep.analysis.renderer.prompt(), rep.tools.parser, rep.reasoning.parser)
    assert got["reasoning"] == "Weather."
    assert [(n, json.loads(a)) for n, a, _ in got["calls"]] == [("get_weather", {"city": "Seoul"})]


# ------------------------------------------------------------------------------------- the analysis


def test_learned_formats() -> None:
    qwen = report("Qwen-Qwen3-0.6B.jinja").analysis
    assert qwen.reasoning is not None and (qwen.reasoning.start, qwen.reasoning.end) == ("<think>", "</think>")
    assert qwen.tools is not None and qwen.tools.encoding == "json-call"
    assert (qwen.tools.call_open.strip(), qwen.tools.call_close.strip(), qwen.tools.separator) == \
        ("<tool_call>", "</tool_call>", "\n")
    glm = report("GLM-4.6.jinja").analysis.tools
    assert glm is not None and glm.encoding == "tag+params" and glm.params is not None
    assert (glm.params.key_start, glm.params.key_end, glm.params.value_start, glm.params.value_end) == \
        ("<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>")
    kimi = report("moonshotai-Kimi-K2.jinja").analysis.tools
    assert kimi is not None and kimi.section == ("<|tool_calls_section_begin|>", "<|tool_calls_section_end|>")
    assert kimi.readable_pattern() == \
        "<|tool_call_begin|>functions.{name}:{index}<|tool_call_argument_begin|>{args}<|tool_call_end|>"
    solar = report("upstage-Solar-Open-100B.jinja").analysis.tools
    assert solar is not None and solar.call_id == "before name"
    mistral = report("Mistral-Small-3.2-24B-Instruct-2506.jinja").analysis.tools
    assert mistral is not None and mistral.call_id == "after name"
    apertus = report("Apertus-8B-Instruct.jinja").analysis.tools
    assert apertus is not None and apertus.json_list and apertus.shape is not None and apertus.shape.name_is_key
    glm47 = report("GLM-4.7-Flash.jinja").analysis.reasoning
    assert glm47 is not None and glm47.forced_open["default"] and not glm47.forced_open["off"]
    cohere = report("Cohere2MoE.jinja").analysis.reasoning
    assert cohere is not None and "<|START_TEXT|>" in cohere.content_markup
    llama = report("meta-llama-Llama-3.1-8B-Instruct.jinja").analysis.tools
    assert llama is not None and llama.single_call_only


def test_templates_that_fail_never_crash() -> None:
    for source in ("{{ raise_exception('never') }}", "{{ messages[5].content }}", ("{% for m in messages %}"
                   "{{ m.content }}{% endfor %}"), "{{ tools | map(attribute='x') | tojson }}"):
        rep = analyse_template(ChatTemplate(source))
        assert rep.tools.parser is None and rep.reasoning.parser is None
        assert rep.as_text() and json.dumps(rep.as_dict())


def test_tools_that_fail_fall_back_to_rendering_without_them() -> None:
    # a template that refuses every request with tools still shows its calls in the history
    source = (TEMPLATES / "llama-cpp-deepseek-r1.jinja").read_text(encoding="utf-8")
    rep = analyse_template(ChatTemplate("{% if tools %}{{ raise_exception('no tools here') }}{% endif %}" + source))
    assert not rep.analysis.renderer.tools_render and rep.analysis.calls_rendered
    assert rep.tools.parser == "deepseekv3"
    # llama.cpp's DeepSeek R1 template (tools | map | tojson, which transformers refuses) renders here
    assert report("llama-cpp-deepseek-r1.jinja").analysis.renderer.tools_render


A_TEMPLATE = (
    "{% for m in messages %}{% if m.role == 'user' %}<user>{{ m.content }}</user>"
    "{% else %}<bot>{% if m.reasoning_content %}[[{{ m.reasoning_content }}]]{% endif %}{{ m.content }}"
    "{% for c in m.tool_calls or [] %}@@CALL {{ c.id }}|{{ c.function.name }}|{{ c.function.arguments | tojson }}"
    "{% endfor %}</bot>{% endif %}{% endfor %}{% if add_generation_prompt %}<bot>{% endif %}"
)


def test_an_unknown_format_gets_a_generic_detector() -> None:
    rep = analyse_template(ChatTemplate(A_TEMPLATE))
    tools, reasoning = rep.tools, rep.reasoning
    assert tools.kind == "generic" and isinstance(tools.parser, type), tools.why
    assert reasoning.kind == "generic" and isinstance(reasoning.parser, type), reasoning.why
    assert rep.analysis.tools is not None and rep.analysis.tools.call_id == "before name"
    assert tools.label == "generic(@@CALL + JSON args)"
    assert reasoning.label == "generic([[ … ]])"
    out = "[[thinking]]Sure.@@CALL abc|get_weather|{\"city\": \"Oslo\"}@@CALL def|find_place|{\"query\": \"x\"}"
    message = parse(out, "<user>hi</user><bot>", tools.parser, reasoning.parser)
    assert (message.reasoning, message.content) == ("thinking", "Sure.")
    assert [(c.name, c.id, json.loads(c.arguments)) for c in message.calls] == \
        [("get_weather", "abc", {"city": "Oslo"}), ("find_place", "def", {"query": "x"})]
    choice = choose_parsers(A_TEMPLATE)
    assert isinstance(choice.tools, type) and choice.why["tools"].endswith("built generic(@@CALL + JSON args)")
    wire = tools.parser.wire
    assert wire is not None
    rendered = wire.render([("get_weather", {"city": "Oslo"})])
    assert [c.name for c in parse(rendered, None, tools.parser, None).calls] == ["get_weather"]


def test_diff_helpers_respect_tags() -> None:
    assert common_prefix("x<think>a", "x</think>b") == "x"
    assert common_suffix("a<|im_end|>", "b|><|im_end|>") == "<|im_end|>"
    assert common_suffix("<|START_RESPONSE|>", "<|START_ACTION|>") == ""
    assert balanced("<a><b>") and not balanced("<a><b") and not balanced("]<")
    between = "</arg_value>\n<arg_key>"
    i, j = split_between(between, len("</arg_value>\n<"), len(between) - len("\n<arg_key>"))
    assert (between[:i].strip(), between[j:].strip()) == ("</arg_value>", "<arg_key>")
    assert pieces("<|END_THINKING|><|START_TEXT|> [BEGIN FINAL RESPONSE] to=self<|message|>") == \
        ["<|END_THINKING|>", "<|START_TEXT|>", "[BEGIN FINAL RESPONSE]", "to=self<|message|>"]


# ------------------------------------------------------------------------------------- generic core

GENERIC_CASES: list[tuple[str, str, dict[str, Any]]] = [
    # (template, model output, expected {content, calls})
    ("upstage-Solar-Open-100B.jinja",
     ('Let me look.<|tool_calls|><|tool_call:begin|>c1<|tool_call:name|>get_weather<|tool_call:args|>'
     '{"city": "Zürich \\"old\\" <|tool_call:end|>", "days": 2}<|tool_call:end|><|calls|>'),
     {"content": "Let me look.", "calls": [("get_weather", {"city": 'Zürich "old" <|tool_call:end|>', "days": 2})]}),
    ("upstage-Solar-Open-100B.jinja",
     '<|tool_calls|><|tool_call:begin|>c1<|tool_call:name|>get_weather<|tool_call:args|>{"city": "Pa',
     {"content": "", "calls": [], "truncated": True}),
    ("upstage-Solar-Open-100B.jinja", "No calls here, just <|tool_call:name|> text.",
     {"content": "No calls here, just <|tool_call:name|> text.", "calls": []}),
    ("MiniMax-M1.jinja",
     ('Two.\n<tool_calls>\n{"name": "get_weather", "arguments": {"city": "A", "nested": {"x": [1, {"y": null}]}}}\n'
     '{"name": "find_place", "arguments": {}}\n</tool_calls>'),
     {"content": "Two.", "calls": [("get_weather", {"city": "A", "nested": {"x": [1, {"y": None}]}}),
                                    ("find_place", {})]}),
    ("MiniMax-M1.jinja", '<tool_calls>\n{"name": "get_weather", "arguments": {"city": "A"} oops',
     {"content": '{"name": "get_weather", "arguments": {"city": "A"} oops', "calls": [], "malformed": True}),
    ("MiniMax-M1.jinja", '<tool_calls>\n{"name": "get_weather", "arguments": {"city": "A"}} and then',
     {"content": "and then", "calls": [("get_weather", {"city": "A"})]}),
    ("CohereForAI-c4ai-command-r-plus-tool_use.jinja",
     ('Action:\n```json\n[\n    {\n        "tool_name": "get_weather",\n        "parameters": {"city": "B"}\n'
     '    }\n]```'),
     {"content": "", "calls": [("get_weather", {"city": "B"})]}),
]


@pytest.mark.parametrize(("name", "output", "expected"), GENERIC_CASES,
                         ids=[f"{n}-{i}" for i, (n, _, _) in enumerate(GENERIC_CASES)])
def test_generic_detectors_stream(name: str, output: str, expected: dict[str, Any]) -> None:
    rep = report(name)
    assert rep.tools.kind == "generic"
    tool = rep.tools.parser
    markers = _markers(tool, None)
    truncated = expected.get("truncated", False)
    whole, streams = run_all_chunkings(lambda: build_response_parser(TOOLS, tool, None, None), output, markers,
                                       truncated)
    got = comparable(whole)
    assert got["content"].strip() == expected["content"]
    assert [(n, json.loads(a)) for n, a, _ in got["calls"]] == expected["calls"]
    allowed = output if expected.get("malformed") else got["content"]
    for chunking, events in streams.items():
        assert comparable(fold(events)) == got, chunking
        assert not check_stream_invariants(events, markers, allowed), chunking


# ------------------------------------------------------------------------------------- entry points


def test_inspect_template_text_and_json(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from app.cli import main

    assert main(["inspect-template", str(TEMPLATES / "Qwen-Qwen3-0.6B.jinja")]) == 0
    text = capsys.readouterr().out
    assert "tool-call parser: qwen25" in text and "reasoning parser: qwen3" in text
    assert "call: '<tool_call>\\n{call}\\n</tool_call>'" in text
    config = {"chat_template": (TEMPLATES / "upstage-Solar-Open-100B.jinja").read_text(), "eos_token": "<|end|>"}
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    assert main(["inspect-template", str(tmp_path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["tool_call_parser"]["kind"] == "generic"
    assert data["tool_call_parser"]["parser"] == "generic(<|tool_calls|> + JSON args)"
    assert data["tool_format"]["call_id"] == "before name"
    assert all(c["ok"] for c in data["tool_call_parser"]["checks"])
    assert analyse_template_file(tmp_path / "tokenizer_config.json").tools.kind == "generic"


def test_runtime_auto_parsers() -> None:
    import httpx

    from app.backends import BACKEND_TYPES, Backend
    from app.served import ServedModel, choose_parsers
    from app.settings import Settings

    settings = Settings(chat_template=TEMPLATES / "upstage-Solar-Open-100B.jinja", reasoning_parser="auto",
                        tool_call_parser="auto")
    template = ChatTemplate.load(TEMPLATES / "upstage-Solar-Open-100B.jinja")
    parsers = choose_parsers(settings, template)
    assert isinstance(parsers.tools, type) and isinstance(parsers.reasoning, type)
    model = ServedModel.of("m", Backend("http://unused", httpx.AsyncClient(), dialect=BACKEND_TYPES["openai"]), template, parsers)
    described = model.describe(None)
    assert described["tool_call_parser"] == "generic(<|tool_calls|> + JSON args)"
    assert described["reasoning_parser"] == "generic(<|think|> … <|end|>)"
    assert "<|tool_calls|>" in model.marker_tokens(True)
    assert parsers.why["tools"]
    assert choose_parsers(settings, None).tools is None


# ------------------------------------------------------------------------------------- the full stack


def _pieces(text: str, size: int = 5) -> list[str]:
    return [text[i:i + size] for i in range(0, len(text), size)]


@pytest.mark.parametrize(("name", "reasoning_kind", "tools_kind"), [
    ("Qwen-Qwen3-0.6B.jinja", "registered", "registered"),
    ("GLM-4.7-Flash.jinja", "registered", "registered"),
    ("upstage-Solar-Open-100B.jinja", "generic", "generic"),
    ("MiniMax-M1.jinja", "none", "generic"),
])
def test_proxy_with_auto_parsers(backend_factory, proxy_factory, name: str, reasoning_kind: str,
                                 tools_kind: str) -> None:
    from tests.conftest import client_for
    from tests.scripted_backend import Script

    rep = report(name)
    assert (rep.reasoning.kind, rep.tools.kind) == (reasoning_kind, tools_kind)
    samples = reasoning_samples(rep.analysis) if rep.reasoning.parser else []
    default_samples = [s for s in samples if s.mode == "default"]
    # the output: reasoning as the template writes it after the default prompt (when it has any),
    # then the calls as the template writes them
    if default_samples:
        sample = default_samples[0].output
        output = sample[:sample.index(CONTENT)] + rep.analysis.blocks[TWO_CALLS.label]
    else:
        output = rep.analysis.turns[TWO_CALLS.label].output
    backend = backend_factory("vllm", model="m")
    proxy = proxy_factory(backend=backend.url, chat_template=str(TEMPLATES / name), reasoning_parser="auto",
                          tool_call_parser="auto")
    client = client_for(proxy)
    messages = [{"role": "user", "content": "Weather?"}]
    backend.script(Script(pieces=_pieces(output)), Script(pieces=_pieces(output)))
    whole = client.chat.completions.create(model="m", messages=messages, tools=TOOLS)
    message = whole.choices[0].message
    expected = [(c.name, dict(c.arguments)) for c in TWO_CALLS.calls]
    assert [(c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls or []] == expected
    assert whole.choices[0].finish_reason == "tool_calls"
    assert not (message.content or "").strip()
    if default_samples:
        assert getattr(message, "reasoning_content", None) == REASONING
    with client.chat.completions.stream(model="m", messages=messages, tools=TOOLS) as stream:
        final = stream.get_final_completion()
    streamed = final.choices[0].message
    assert [(c.function.name, json.loads(c.function.arguments)) for c in streamed.tool_calls or []] == expected
    health = httpx.get(proxy.url + "/health").json()
    assert health["tool_call_parser"] == rep.tools.label
    assert health["reasoning_parser"] == rep.reasoning.label
