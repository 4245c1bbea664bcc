"""The parsers as a library, used the way SGLang users use SGLang's (no prompt, no app): start
states per name, ``force_reasoning`` / ``stream_reasoning`` as in SGLang's ``ReasoningParser``,
the unopened-block rule, envelopes and end-of-turn tokens with each parser on its own."""

from __future__ import annotations

import json

import pytest

from parsers import FunctionCallParser, ReasoningParser

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}},
    {"type": "function", "function": {"name": "write_file", "parameters": {
        "type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}}}}}]


def stream(parser: ReasoningParser, chunks: list[str]) -> tuple[str, str, list[tuple[str, str]]]:
    """Feed ``chunks`` through SGLang's streaming surface; the joined reasoning and normal text,
    and what each call returned."""
    steps = [parser.parse_stream_chunk(chunk) for chunk in chunks]
    steps.append(parser.parse_stream_end())
    return "".join(r for r, _ in steps), "".join(n for _, n in steps), steps


# SGLang 0.5.23's ReasoningParser with force_reasoning=None: the detector's default, overridden to
# True for qwen3-thinking, gpt-oss and minimax; DeepSeekR1Detector (deepseek-r1, step3), KimiK3Detector,
# K2V3Detector (k2_horizon) and Command 4's default to True.
SGLANG_STARTS_INSIDE = {
    "qwen3": False, "qwen3-thinking": True, "deepseek-r1": True, "deepseek-v3": False, "glm45": False,
    "kimi": False, "kimi_k2": False, "kimi_k3": True, "minimax": True, "minimax-m3": False, "step3": True,
    "nemotron_3": False, "interns1": False, "mistral": False, "gemma4": False, "k2_horizon": True,
    "cohere_command4": True,
}


@pytest.mark.parametrize(("name", "inside"), sorted(SGLANG_STARTS_INSIDE.items()))
def test_start_state_is_sglangs(name: str, inside: bool) -> None:
    """Text without any marker: reasoning where SGLang starts inside, content where it starts outside."""
    reasoning, normal = ReasoningParser(name).parse_non_stream("Just some text.")
    assert (reasoning, normal) == (("Just some text.", "") if inside else ("", "Just some text."))


@pytest.mark.parametrize("name", ["qwen3", "glm45", "kimi_k2", "deepseek-v3", "nemotron_3", "interns1",
                                  "qwen3-thinking", "deepseek-r1", "minimax", "step3"])
def test_an_unopened_block_ends_at_its_end_marker(name: str) -> None:
    text = "…the last section</think>the rest"
    assert ReasoningParser(name).parse_non_stream(text) == ("…the last section", "the rest")
    for stream_reasoning in (True, False):
        reasoning, normal, _ = stream(ReasoningParser(name, stream_reasoning), list(text))
        assert (reasoning, normal) == ("…the last section", "the rest")


def test_undecided_text_is_held_until_the_output_shows_what_it_is() -> None:
    parser = ReasoningParser("qwen3")
    assert parser.in_reasoning_at_start is None
    assert parser.parse_stream_chunk("Thinking about it") == ("", "")
    assert parser.parse_stream_chunk(" more.</think>\n\nAnswer") == ("Thinking about it more.", "Answer")
    assert parser.parse_stream_chunk(" goes on.") == ("", " goes on.")
    assert parser.parse_stream_end() == ("", "")
    plain = ReasoningParser("qwen3")
    assert plain.parse_stream_chunk("No reasoning here.") == ("", "")
    assert plain.parse_stream_end() == ("", "No reasoning here.")


def test_a_known_start_streams_from_the_first_token() -> None:
    """``force_reasoning`` or a prompt decides the start: nothing is held."""
    assert ReasoningParser("qwen3", force_reasoning=False).parse_stream_chunk("Hello") == ("", "Hello")
    assert ReasoningParser("qwen3", force_reasoning=True).parse_stream_chunk("Hmm") == ("Hmm", "")
    opened = ReasoningParser("qwen3", prompt="<|im_start|>assistant\n<think>\n")
    assert opened.in_reasoning_at_start is True
    assert opened.parse_stream_chunk("Hmm") == ("Hmm", "")
    plain = ReasoningParser("qwen3", prompt="<|im_start|>assistant\n")
    assert plain.in_reasoning_at_start is False
    assert plain.parse_stream_chunk("Hello") == ("", "Hello")


def test_force_reasoning_as_in_sglang() -> None:
    assert ReasoningParser("qwen3", force_reasoning=True).parse_non_stream("All reasoning") == ("All reasoning", "")
    assert ReasoningParser("qwen3", True, True).parse_non_stream("a</think>b") == ("a", "b")  # positional, as SGLang's
    assert ReasoningParser("deepseek-r1", force_reasoning=False).parse_non_stream("<think>a</think>b") == ("a", "b")
    assert ReasoningParser("qwen3", force_reasoning=False).parse_non_stream("Hello") == ("", "Hello")


def test_stream_reasoning_false_delivers_reasoning_whole() -> None:
    parser = ReasoningParser("deepseek-r1", stream_reasoning=False)
    reasoning, normal, steps = stream(parser, ["Step one. ", "Step two.", "</think>", "Answer."])
    assert (reasoning, normal) == ("Step one. Step two.", "Answer.")
    assert [r for r, _ in steps if r] == ["Step one. Step two."]


def test_end_of_turn_token_with_the_reasoning_parser_alone() -> None:
    assert ReasoningParser("qwen3").parse_non_stream("<think>x</think>Hi.<|im_end|>") == ("x", "Hi.")
    assert ReasoningParser("deepseek-r1").parse_non_stream("x</think>Hi.<｜end▁of▁sentence｜>") == ("x", "Hi.")
    assert ReasoningParser("gemma4").parse_non_stream("The answer is 4.<channel|>") == ("", "The answer is 4.")


def test_sglang_style_chain_of_two_parsers() -> None:
    """Reasoning first, then the tool parser over the normal text, each driven by hand."""
    text = 'Need it.\n</think>\n\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call><|im_end|>'
    reasoning_parser = ReasoningParser("qwen3")
    tool_parser = FunctionCallParser(TOOLS, "qwen25")
    reasoning, normal, calls = "", "", []
    for char in text:
        r, n = reasoning_parser.parse_stream_chunk(char)
        reasoning += r
        content, items = tool_parser.parse_stream_chunk(n)
        normal += content
        calls += items
    r, n = reasoning_parser.parse_stream_end()
    reasoning += r
    content, items = tool_parser.parse_stream_chunk(n)
    normal += content
    calls += items
    content, items = tool_parser.finish()
    normal += content
    calls += items
    assert reasoning == "Need it."
    assert normal == ""
    assert calls[0].name == "get_weather"
    assert json.loads("".join(c.parameters for c in calls)) == {"city": "Oslo"}


@pytest.mark.parametrize(("name", "text", "normal"), [
    ("kimi_k3", "<|open|>response<|sep|>Hi.<|close|>response<|sep|><|close|>message<|sep|><|end_of_msg|>", "Hi."),
    ("cohere", "<|START_RESPONSE|>Hi.<|END_RESPONSE|><|END_OF_TURN_TOKEN|>", "Hi."),
    ("cohere", "\n<|START_TEXT|>\nHi.\n<|END_TEXT|>\n", "Hi."),
    ("functionary_v32", "all\nHi.<|eot_id|>", "Hi."),
    ("gpt-oss", "<|channel|>final<|message|>Hi.<|return|>", "Hi."),
    ("llama3", "Hi.<|eot_id|>", "Hi."),
    ("gemma4", "Hi.<channel|>", "Hi."),
])
def test_the_tool_parser_alone_drops_envelopes_and_end_tokens(name: str, text: str, normal: str) -> None:
    assert FunctionCallParser(TOOLS, name).parse_non_stream(text) == (normal, [])
    parser = FunctionCallParser(TOOLS, name)
    pieces = [parser.parse_stream_chunk(char)[0] for char in text]
    assert "".join(pieces) + parser.finish()[0] == normal


def test_minicpm5_cdata_code_keeps_its_indentation() -> None:
    code = "    def f(x):\n        if x < 0:\n            return -x\n        return x\n"
    text = f'<function name="write_file"><param name="path">f.py</param><param name="content"><![CDATA[{code}]]></param></function>'
    normal, calls = FunctionCallParser(TOOLS, "minicpm5").parse_non_stream(text)
    assert normal == ""
    assert json.loads(calls[0].parameters) == {"path": "f.py", "content": code}
