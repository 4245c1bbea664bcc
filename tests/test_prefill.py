"""Continuing a prefilled assistant message (issue 27, item 8): the parser chain starts in the state
the prefilled text leaves it in and returns only what the output adds — in one chunk, per
character and in random splits alike (``ResponseParser.prime``, ``build_response_parser(prefill=)``).

The prompts are the generation prompts of the models' own templates (``tests/data/templates``); the
prefill is what the client's final assistant message holds, the output what the model writes next.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from parsers import build_response_parser, fold
from parsers.registry import reasoning_detector_class
from tests.fixture_cases import DEFAULT_TOOLS
from tests.harness import check_stream_invariants, comparable, held, run_all_chunkings

CHATML = "<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\n"
HARMONY = "<|start|>user<|message|>Weather in Paris?<|end|><|start|>assistant"


@dataclass(frozen=True)
class Continued:
    name: str
    tool_parser: str | None
    reasoning_parser: str | None
    prompt: str
    prefill: str
    output: str
    content: str = ""
    reasoning: str = ""
    calls: tuple[tuple[str, str], ...] = ()


CASES = [
    Continued("inside a thought the prompt opened: the thought goes on", "qwen25", "qwen3", CHATML + "<think>\n",
              "Let me think about", " Paris.\n</think>\n\nIt is sunny.", content="It is sunny.", reasoning=" Paris."),
    Continued("a prefill that closed the thought: only the answer", "qwen25", "qwen3", CHATML + "<think>\n",
              "Short.\n</think>\n\n", "It is sunny.", content="It is sunny."),
    Continued("a prefill that opened the thought itself", "qwen3_coder", "qwen3", CHATML, "<think>\nThe user",
              " wants weather.</think>Sunny.", content="Sunny.", reasoning=" wants weather."),
    Continued("the answer's text goes on; the space the prefill ended with is the prefill's", "qwen25", None, CHATML,
              "The answer is ", "42.", content="42."),
    Continued("the same where whitespace next to calls is content", "llama3", None, CHATML,
              "The answer is ", "42.", content="42."),
    Continued("a call the prefill opened is the answer's, whole", "qwen25", "qwen3", CHATML + "<think>\n\n</think>\n\n",
              '<tool_call>\n{"name": "get_weather", "arguments": {"city": "', 'Paris"}}\n</tool_call>',
              calls=(("get_weather", '{"city": "Paris"}'),)),
    Continued("a call the prefill completed is the client's; the answer's calls count from 0", "qwen25", "qwen3",
              CHATML + "<think>\n\n</think>\n\n", '<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>\n',
              '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n</tool_call>',
              calls=(("get_weather", '{"city": "Rome"}'),)),
    Continued("XML parameters: a prefill that stopped inside a value", "qwen3_coder", "qwen3",
              CHATML + "<think>\n\n</think>\n\n", "<tool_call>\n<function=get_weather>\n<parameter=city>\nPar",
              "is\n</parameter>\n</function>\n</tool_call>", calls=(("get_weather", '{"city": "Paris"}'),)),
    Continued("a call section the prefill opened", "kimi_k2", "kimi_k2", "<|im_assistant|>assistant<|im_middle|>",
              "<think></think><|tool_calls_section_begin|>",
              "<|tool_call_begin|>functions.get_time:0<|tool_call_argument_begin|>{}<|tool_call_end|>"
              "<|tool_calls_section_end|>", calls=(("get_time", "{}"),)),
    Continued("Harmony: a final channel the prefill opened", "gpt-oss", None, HARMONY,
              "<|channel|>final<|message|>Hello", " there.<|return|>", content=" there."),
    Continued("Harmony: inside the analysis channel, then the final one", "gpt-oss", "gpt-oss", HARMONY,
              "<|channel|>analysis<|message|>Hmm", " ok.<|end|><|start|>assistant<|channel|>final<|message|>Yes.<|return|>",
              content="Yes.", reasoning=" ok."),
    Continued("a response envelope the prefill opened (Command R7B)", "cohere", "cohere",
              "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>", "<|START_THINKING|>Easy.<|END_THINKING|><|START_RESPONSE|>It",
              " is sunny.<|END_RESPONSE|><|END_OF_TURN_TOKEN|>", content=" is sunny."),
]


def _parser(case: Continued):  # type: ignore[no-untyped-def]
    return build_response_parser(DEFAULT_TOOLS, case.tool_parser, case.reasoning_parser, case.prompt,
                                 prefill=case.prefill)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_continuation(case: Continued) -> None:
    markers = ("<think>", "</think>", "<tool_call>", "</tool_call>", "<|channel|>", "<|message|>", "<|return|>",
               "<|end|>", "<|tool_call_end|>", "<|END_RESPONSE|>", "</parameter>")
    whole, streams = run_all_chunkings(lambda: _parser(case), case.output, markers)
    assert (whole.content, whole.reasoning) == (case.content, case.reasoning)
    assert [(c.name, c.arguments) for c in whole.calls] == list(case.calls)
    assert [c.index for c in whole.calls] == list(range(len(case.calls)))
    for name, events in streams.items():
        assert comparable(fold(events)) == comparable(whole), name
        assert comparable(fold(held(events))) == comparable(whole), name
        assert not check_stream_invariants(events, markers, case.content + case.reasoning), name


def test_without_a_prefill_the_same_output_reads_differently() -> None:
    """The cases above prove something: parsed from the prompt alone, the continuation of a call
    is not a call, and the continuation of a thought is not reasoning."""
    call = CASES[5]
    plain = fold(build_response_parser(DEFAULT_TOOLS, call.tool_parser, call.reasoning_parser, call.prompt)
                 .feed(call.output))
    assert not plain.calls
    thought = CASES[0]
    parser = build_response_parser(DEFAULT_TOOLS, thought.tool_parser, thought.reasoning_parser, "")
    message = fold(parser.feed(thought.output) + parser.end())
    assert message.reasoning != thought.reasoning


def test_prime_comes_once_before_feed() -> None:
    parser = build_response_parser(DEFAULT_TOOLS, "qwen25", None, CHATML, prefill="Hi")
    with pytest.raises(AssertionError):
        parser.prime("again")


#: (reasoning parser, prompt, thought, text, the model's next words, its answer's reasoning and content)
WRITTEN: list[tuple[str, str, str, str, str, str, str]] = [
    ("qwen3", CHATML + "<think>\n", "I'm thinking", "Hello, ", "world!", "", "world!"),
    ("qwen3", CHATML + "<think>\n", "I'm", "", " thinking\n</think>\n\nHi.", " thinking", "Hi."),
    ("qwen3", CHATML + "<think>\n", "", "Hello, ", "world!", "", "world!"),
    ("qwen3", CHATML, "I'm", "", " thinking</think>Hi.", " thinking", "Hi."),
    ("qwen3", CHATML, "", "Hello, ", "world!", "", "world!"),
    ("gpt-oss", HARMONY, "I'm thinking", "Hello, ", "world!<|return|>", "", "world!"),
    ("gpt-oss", HARMONY, "I'm", "", " thinking<|end|><|start|>assistant<|channel|>final<|message|>Hi.", " thinking",
     "Hi."),
    ("gpt-oss", HARMONY, "", "Hello, ", "world!", "", "world!"),
    ("muse", "<|start|>user<|message|>Hi<|eot|><|start|>assistant", "I'm thinking", "Hello, ", "world!", "", "world!"),
]


@pytest.mark.parametrize(("reasoning", "prompt", "thought", "text", "output", "expect_reasoning", "expect_content"),
                         WRITTEN, ids=[f"{w[0]}-{i}" for i, w in enumerate(WRITTEN)])
def test_a_prefill_written_in_the_reasoning_format(reasoning: str, prompt: str, thought: str, text: str, output: str,
                                                   expect_reasoning: str, expect_content: str) -> None:
    """``ReasoningDetector.continuation`` writes a prefilled message's thought and text in the format's
    own markers (issue 39, item 6), and the chain primed with it returns what the model adds: after a
    prompt that opened the thought or not, a thought that goes on or is closed, Harmony's envelope."""
    detector = reasoning_detector_class(reasoning)()
    inside = bool(detector.initial_state(prompt))
    prefill = detector.continuation(inside, thought, text, answer=bool(text))
    whole, streams = run_all_chunkings(lambda: build_response_parser([], None, reasoning, prompt, prefill=prefill),
                                       output, ("<think>", "</think>", "<|end|>", "<|start|>", "<|message|>"))
    assert (whole.reasoning, whole.content) == (expect_reasoning, expect_content), prefill
    for name, events in streams.items():
        assert comparable(fold(events)) == comparable(whole), name
