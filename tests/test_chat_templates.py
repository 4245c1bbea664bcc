"""Chat-template rendering matches Hugging Face transformers exactly, on 71 real templates.

``tests/data/hf_renders.json`` holds transformers' own renders (see ``make_hf_renders.py``). We
render the same conversations with tool-call arguments as JSON *text* (what OpenAI clients send)
and must produce the same prompt HF produces from argument *objects*.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.templates import chat_template
from app.templates.chat_template import ChatTemplate, TemplateError
from tests.data.render_cases import PINNED_NOW, render_cases

DATA = Path(__file__).parent / "data"
REFERENCE: dict[str, dict] = json.loads((DATA / "hf_renders.json").read_text(encoding="utf-8"))
REQUIRED = [
    "Qwen-Qwen3-0.6B.jinja",
    "meta-llama-Llama-3.1-8B-Instruct.jinja",
    "mistralai-Mistral-Nemo-Instruct-2407.jinja",
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja",
    "openai-gpt-oss-120b.jinja",
]
# transformers itself fails on these; we render them (what each needed, and what must be in the render)
HF_FAILS_WE_RENDER = {
    # arguments objects concatenated to strings ('str' + dict): ours render as their JSON text
    ("meetkai-functionary-medium-v3.2.jinja", "tools"): ('{"city": "Paris"}',),
    # the template builds lists with .append: template-local values may change in our sandbox
    ("Kimi-K2-Instruct.jinja", "tools"): ("functions.get_weather", '{"city": "Paris"}', '{"temp": 21}'),
    ("Kimi-K2-Thinking.jinja", "tools"): ("functions.get_weather", '{"city": "Paris"}', '{"temp": 21}'),
    # tojson of a generator (tools | map(attribute='function')): ours serialises it as a list
    ("llama-cpp-deepseek-r1.jinja", "tools"): ('"name": "get_weather"', '{"city": "Paris"}', '{"temp": 21}'),
}


@pytest.fixture(autouse=True)
def pinned_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(chat_template, "_now", lambda: PINNED_NOW)


def _cases() -> list[tuple[str, str]]:
    return [(name, label) for name in sorted(REFERENCE) for label in REFERENCE[name]]


def test_required_templates_are_in_the_reference() -> None:
    for name in REQUIRED:
        assert all(isinstance(REFERENCE[name][label], str) for label in ("plain", "tools")), name


@pytest.mark.parametrize(("name", "label"), _cases(), ids=[f"{n}:{case}" for n, case in _cases()])
def test_render_matches_transformers(name: str, label: str) -> None:
    template = ChatTemplate((DATA / "templates" / name).read_text(encoding="utf-8"), "<BOS>", "<EOS>")
    kwargs = render_cases(dict_arguments=False)[label]
    expected = REFERENCE[name][label]
    if isinstance(expected, dict):
        if (name, label) in HF_FAILS_WE_RENDER:
            assert "get_weather" in template.render(**kwargs)
            return
        with pytest.raises(TemplateError):
            template.render(**kwargs)
        return
    assert template.render(**kwargs) == expected


def test_qwen3_exact_prompt_with_a_tool_call() -> None:
    template = ChatTemplate.load(DATA / "templates" / "Qwen-Qwen3-0.6B.jinja")
    prompt = template.render(**render_cases(dict_arguments=False)["tools"])
    assert prompt.endswith(
        "<|im_start|>assistant\n<tool_call>\n"
        '{"name": "get_weather", "arguments": {"city": "Paris"}}\n'
        "</tool_call><|im_end|>\n"
        "<|im_start|>user\n<tool_response>\n{\"temp\": 21}\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\nIt is 21°C.<|im_end|>\n"
        "<|im_start|>user\nThanks!<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    off = template.render(messages=[{"role": "user", "content": "Hi"}], enable_thinking=False)
    assert off.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")


def test_raise_exception_becomes_template_error() -> None:
    template = ChatTemplate("{{ raise_exception('Conversation roles must alternate') }}")
    with pytest.raises(TemplateError, match="roles must alternate"):
        template.render(messages=[{"role": "user", "content": "x"}])


def test_tojson_keeps_unicode_and_options() -> None:
    template = ChatTemplate("{{ x | tojson }}|{{ x | tojson(indent=2) }}|{{ x | tojson(sort_keys=True) }}")
    out = template.render(messages=[], x={"b": "é<", "a": 1})
    assert out == '{"b": "é<", "a": 1}|{\n  "b": "é<",\n  "a": 1\n}|{"a": 1, "b": "é<"}'


def test_loop_controls_and_generation_block() -> None:
    template = ChatTemplate(
        "{% for m in messages %}{% if loop.index > 1 %}{% break %}{% endif %}"
        "{% generation %}{{ m.content }}{% endgeneration %}{% endfor %}"
    )
    assert template.render(messages=[{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]) == "a"


def test_load_tokenizer_config_and_directory(tmp_path: Path) -> None:
    config = {"chat_template": "{{ bos_token }}{{ messages[0].content }}{{ eos_token }}",
              "bos_token": {"content": "<s>"}, "eos_token": "</s>"}
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    for source in (tmp_path / "tokenizer_config.json", tmp_path):
        template = ChatTemplate.load(source)
        assert template.render(messages=[{"role": "user", "content": "hi"}]) == "<s>hi</s>"


def test_sandbox_blocks_attribute_escapes() -> None:
    template = ChatTemplate("{{ messages.__class__.__mro__ }}")
    with pytest.raises(TemplateError):
        template.render(messages=[])


def test_template_local_lists_may_change_but_caller_values_may_not() -> None:
    local = ChatTemplate("{% set seen = [] %}{% for m in messages %}{% set _ = seen.append(m.content) %}{% endfor %}"
                         "{{ seen | join(',') }}")
    assert local.render(messages=[{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]) == "a,b"
    for source in ("{{ messages.append(1) }}", "{{ messages[0].update({'content': 'x'}) }}",
                   "{{ tools.pop() }}", "{{ extra.clear() }}"):
        with pytest.raises(TemplateError):
            ChatTemplate(source).render(messages=[{"role": "user", "content": "a"}],
                                        tools=[{"type": "function"}], extra={"k": 1})


def test_tojson_takes_generators_and_undefined() -> None:
    template = ChatTemplate("{{ tools | map(attribute='function') | tojson }}|{{ missing | tojson }}")
    tools = [{"type": "function", "function": {"name": "f"}}]
    assert template.render(messages=[], tools=tools) == '[{"name": "f"}]|null'
