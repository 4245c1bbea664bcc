"""gpt-oss (OpenAI Harmony) tool calls, reasoning and content, parsed from text as one program.

The generation prompt ends with ``<|start|>assistant``; the output is a sequence of messages::

    <|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant to=functions.get_weather<|channel|>commentary <|constrain|>json<|message|>{"city": "Paris"}

→ reasoning ``Need the weather.``, one call ``get_weather({"city": "Paris"})`` (its ``<|call|>``
stop token is normally not in the text). The recipient may also follow the channel
(``<|channel|>commentary to=functions.get_weather``); the content type may be ``<|constrain|>json``
with or without a space before it, or a bare `` json``. ``commentary`` without a recipient is a
user-visible preamble (content), ``final`` is content. Calls to built-in tools (``python``,
``browser.*``) are dropped. Details and the malformed-output policy: ``parsers.core.harmony``.

The format carries its own reasoning (``handles_reasoning``): no separate reasoning parser runs,
and ``prepare(prompt)`` reads the start state from the prompt's tail.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import ClassVar

from parsers.core.cursor import Cursor
from parsers.core.harmony import (
    CHANNEL,
    GENERATION_PROMPT,
    HARMONY,
    START,
    Dialect,
    Start,
    harmony_messages,
    start_from_prompt,
)
from parsers.core.program import Out
from parsers.function_call import ToolCallDetector
from parsers.tools import ToolSpec


class GptOss(ToolCallDetector):
    dialect: ClassVar[Dialect] = HARMONY
    start_markers = (START, CHANNEL)
    markers = HARMONY.markers
    trim_around_calls = False  # messages are separated by markers; the program places whitespace
    handles_reasoning = True

    def __init__(self, tools: Sequence[ToolSpec] = ()) -> None:
        super().__init__(tools)
        self.start: Start = GENERATION_PROMPT

    def prepare(self, prompt: str | None) -> None:
        self.start = start_from_prompt(prompt)

    def has_tool_call(self, text: str) -> bool:
        return "to=functions." in text

    def body(self, cur: Cursor, out: Out) -> Generator[None, None, None]:
        # a generator: the start state is read when parsing begins, i.e. after ``prepare``
        yield from harmony_messages(cur, out, self.dialect, self.start, frozenset(self.tools_by_name), calls=True)
