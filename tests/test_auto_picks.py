"""``auto`` picks, for the chat templates of models SGLang names a parser for, the detector that
name maps to here (the registry's canonical name, aliases resolved)."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pytest

from app.templates.autodetect import Report, analyse_template
from app.templates.chat_template import ChatTemplate
from parsers.registry import canonical_reasoning_parser, canonical_tool_parser

TEMPLATES = Path(__file__).parent / "data" / "templates"


@cache
def report(name: str) -> Report:
    return analyse_template(ChatTemplate((TEMPLATES / name).read_text(encoding="utf-8"), name=name))


# (template, SGLang reasoning parser name, SGLang tool-call parser name); None: nothing to pick
PICKS = [
    ("Cohere2MoE.jinja", "cohere_command4", "cohere_command4"),
    ("deepseek-ai-DeepSeek-V4.jinja", "deepseek-v4", "deepseekv4"),
    ("deepseek-ai-DeepSeek-V4-Flash-0731.jinja", "deepseek-v4", "deepseekv4"),
    ("MiMo-VL.jinja", "mimo", None),
    ("tencent-Hy3.jinja", "hunyuan", "hunyuan"),
]


@pytest.mark.parametrize(("template", "reasoning", "tools"), PICKS, ids=[p[0] for p in PICKS])
def test_auto_picks_the_sglang_names_detector(template: str, reasoning: str | None, tools: str | None) -> None:
    rep = report(template)
    if reasoning is not None:
        assert rep.reasoning.parser == canonical_reasoning_parser(reasoning), rep.reasoning.why
    if tools is not None:
        assert rep.tools.parser == canonical_tool_parser(tools), rep.tools.why


# No V4.1 or GigaChat 3.5 template is in tests/data; both models write DeepSeek V4's DSML layout
# with other tags, so V4's template respelled stands in for theirs.
RESPELLED = [
    ("V4.1: <｜DSML｜ calls>", {"'｜DSML｜'": "'｜DSML｜ '", "tool_calls>": "calls>"}, "deepseek-v41", "deepseekv41"),
    ("GigaChat 3.5: <｜GCML｜tool_calls>", {"'｜DSML｜'": "'｜GCML｜'"}, None, "gigachat35"),
]


@pytest.mark.parametrize(("label", "edits", "reasoning", "tools"), RESPELLED, ids=[r[0] for r in RESPELLED])
def test_auto_picks_by_the_spelling_the_template_writes(label: str, edits: dict[str, str], reasoning: str | None,
                                                        tools: str) -> None:
    source = (TEMPLATES / "deepseek-ai-DeepSeek-V4-Flash-0731.jinja").read_text(encoding="utf-8")
    for old, new in edits.items():
        assert old in source
        source = source.replace(old, new)
    rep = analyse_template(ChatTemplate(source, name=label))
    assert rep.tools.parser == canonical_tool_parser(tools), rep.tools.why
    if reasoning is not None:
        assert rep.reasoning.parser == canonical_reasoning_parser(reasoning), rep.reasoning.why


# Beam's template is not in tests/data; this one renders its messages as SGLang's Beam response
# template describes them (analysis reasoning, final answers, calls to bare names with XML bodies).
BEAM_TEMPLATE = """
{%- for m in messages -%}
<|start|>{{ m.role }}
{%- if m.tool_calls -%}
{%- for tc in m.tool_calls %} to={{ tc.function.name }}<|channel|>analysis <|constrain|>xml<|message|>
{%- for k, v in tc.function.arguments.items() %}<rfl:parameter name="{{ k }}">
{{ v }}
</rfl:parameter>{% endfor %}<|call|>{% if not loop.last %}<|start|>assistant{% endif %}
{%- endfor -%}
{%- elif m.role == 'assistant' -%}
<|channel|>final<|message|>{{ m.content }}<|return|>
{%- else -%}
<|message|>{{ m.content }}<|end|>
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt %}<|start|>assistant{% endif -%}
"""


def test_auto_picks_beam_for_a_beam_template_not_gpt_oss() -> None:
    rep = analyse_template(ChatTemplate(BEAM_TEMPLATE, name="beam"))
    assert rep.tools.parser == canonical_tool_parser("beam"), rep.tools.why
    assert rep.reasoning.parser == canonical_reasoning_parser("beam"), rep.reasoning.why
    assert [k.name for k in rep.known] == ["beam"]


def test_response_template_means_auto(monkeypatch: pytest.MonkeyPatch) -> None:
    """SGLang's ``response_template`` names (either kind) choose what ``auto`` does, from the
    chat template; the choice parses the template's own render of a call."""
    from app.runtime import validate_parser_names
    from app.served import choose_parsers
    from app.settings import Settings
    from parsers import build_response_parser, fold

    monkeypatch.setenv("TOOLWIRE_REASONING_PARSER", "response_template")
    settings = Settings(chat_template=TEMPLATES / "tencent-Hy3.jinja", tool_call_parser="response_template")
    assert (settings.reasoning_parser, settings.tool_call_parser) == ("auto", "auto")
    validate_parser_names(settings)
    choice = choose_parsers(settings, ChatTemplate.load(TEMPLATES / "tencent-Hy3.jinja"))
    assert (choice.reasoning, choice.tools) == ("hunyuan", "hunyuan")
    prompt = "<｜hy_User:opensource｜>Hi<｜hy_Assistant:opensource｜><think:opensource>"
    output = ("Need weather.</think:opensource><tool_calls:opensource>\n<tool_call:opensource>get_weather"
              "<tool_sep:opensource>\n<arg_key:opensource>city</arg_key:opensource>\n"
              "<arg_value:opensource>Paris</arg_value:opensource>\n</tool_call:opensource>\n</tool_calls:opensource>")
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}}}}]
    chain = build_response_parser(tools, choice.tools, choice.reasoning, prompt)
    message = fold(chain.feed(output) + chain.end())
    assert message.reasoning == "Need weather."
    assert [(c.name, c.arguments) for c in message.calls] == [("get_weather", '{"city": "Paris"}')]
