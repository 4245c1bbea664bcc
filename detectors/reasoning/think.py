"""``<think>…</think>`` reasoning, as written by many model families.

The rendered prompt decides the start state when it is known (a template that opens ``<think>``
in the generation prompt starts the output inside reasoning; one that closes an empty block
starts outside). The ``force_reasoning`` defaults below (SGLang's) apply when the prompt is not
known; then, since these templates open ``<think>`` in the generation prompt for some requests
(``prompt_may_open``), an output that closes a block it never opened began inside it.

| name                   | models                                   | starts inside by default |
|------------------------|------------------------------------------|--------------------------|
| qwen3                  | Qwen3 hybrid, QwQ                        | no                       |
| qwen3-thinking         | Qwen3 thinking-only (2507)               | yes                      |
| deepseek-r1            | DeepSeek-R1 and distills                 | yes                      |
| deepseek-v3            | DeepSeek V3.1+ (chat_template_kwargs.thinking decides via the prompt) | no |
| glm45                  | GLM-4.5 / 4.6 / 4.7                      | no                       |
| kimi_k2                | Kimi K2 Thinking                         | no                       |
| minimax                | MiniMax-M1 / M2                          | yes                      |
| minimax-append-think   | MiniMax-M2, reasoning kept inline        | (no split: see class)    |
| step3                  | StepFun Step-3                           | yes                      |
| nemotron_3             | NVIDIA Nemotron 3 Nano                   | no                       |
| interns1               | Intern-S1                                | no                       |
"""

from __future__ import annotations

from collections.abc import Generator, Iterable

from detectors.turns import CHATML, DEEPSEEK, GLM, KIMI, MINIMAX
from parsers.declare import Cursor, Out, Program, ReasoningDetector


class Qwen3(ReasoningDetector):
    start = ("<think>",)
    end = "</think>"
    prompt_may_open = True  # Qwen3 thinking-2507, Qwen 3.5, QwQ: the generation prompt opens <think>
    end_tokens = CHATML


class Qwen3Thinking(Qwen3):
    force_reasoning = True


class DeepSeekR1(Qwen3):
    force_reasoning = True
    end_tokens = DEEPSEEK


class DeepSeekV3(Qwen3):
    """V3.1 hybrid: the template appends ``<think>`` (thinking) or ``</think>`` (not) to the prompt."""

    end_tokens = DEEPSEEK


class Glm45(Qwen3):
    end_tokens = GLM


class KimiK2(Qwen3):
    """Kimi K2 Thinking interleaves thinking and calls: a call section (or a bare call) written
    inside an open ``<think>`` block is passed on to the tool-call parser, and the thought resumes
    after it, up to its ``</think>`` — never markup in the content."""

    end_tokens = KIMI
    passthrough = (("<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"),
                   ("<|tool_call_section_begin|>", "<|tool_call_section_end|>"),
                   ("<|tool_call_begin|>", "<|tool_call_end|>"),
                   ("<|tool_calls_section_end|>", ""), ("<|tool_call_section_end|>", ""))


class Minimax(Qwen3):
    force_reasoning = True
    end_tokens = MINIMAX


class MinimaxAppendThink(Qwen3):
    """MiniMax-M2 with reasoning left in the content: the generation prompt opened ``<think>``, so
    the content is ``<think>`` + the output, verbatim (clients that render think blocks expect it)."""

    def make_program(self, in_reasoning: bool | None, stop_markers: Iterable[str] = ()) -> Program:
        def program(cur: Cursor, out: Out) -> Generator[None, None, None]:
            out.content.write(self.start[0])
            yield from cur.rest(out.content.write)

        return program

    end_tokens = MINIMAX

    @classmethod
    def markers(cls) -> tuple[str, ...]:
        return ()


class Step3(Qwen3):
    force_reasoning = True


class Nemotron3(Qwen3):
    pass


class InternS1(Qwen3):
    pass
