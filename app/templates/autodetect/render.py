"""Rendering a chat template with controlled variations, and cutting out the assistant's turn.

Every variation is one conversation — a user message, then one assistant message — rendered
without the generation prompt, next to the same user message rendered *with* it. The assistant's
**output** is what the model would have written after that prompt: the full render cut at the
generation prompt (where the two renders part, markup-aware; a tail of the prompt that the render
repeats, like Command R+'s ``<|CHATBOT_TOKEN|>``, is not output), up to where the render stops
depending on the message (end-of-turn tokens and whatever the template appends after the last
message), found by diffing against another variation.

Values are sentinels (``get_weather``, ``VAL_ALPHA``, ``73519`` …) so they can be found in the
render. A variation that the template refuses (``raise_exception``, a sandbox error) is simply
unknown (``None``); templates that need a variable the request does not give (FireFunction's
``functions``) get an empty string for it; templates that fail whenever tools are given are
rendered without them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from app.templates.autodetect.diff import is_markup, prefix_len, suffix_len
from app.templates.chat_template import ChatTemplate, TemplateError

USER = "USER_MESSAGE_TEXT"
CONTENT = "CONTENT_SENTINEL_ONE"
CONTENT_2 = "CONTENT_SENTINEL_TWO"
REASONING = "REASONING_SENTINEL_ONE"

NAME_1, NAME_2 = "get_weather", "find_place"
KEY_1, KEY_2, KEY_3 = "city", "days", "query"
VALUE_1, VALUE_2, VALUE_3 = "VAL_ALPHA", 73519, "VAL_BRAVO"
# Mistral templates insist on 9 alphanumeric characters
ID_1, ID_2, ID_ALT = "Xk7Qp2Ma1", "Rt5Wn8Zb2", "Jc3Lv6Hd9"

TOOLS: list[dict[str, Any]] = [
    {"type": "function", "function": {
        "name": NAME_1, "description": "Get the weather forecast for a city",
        "parameters": {"type": "object", "properties": {
            KEY_1: {"type": "string", "description": "The city"},
            KEY_2: {"type": "integer", "description": "How many days"}}, "required": [KEY_1]}}},
    {"type": "function", "function": {
        "name": NAME_2, "description": "Find a place",
        "parameters": {"type": "object", "properties": {
            KEY_3: {"type": "string", "description": "What to look for"}}, "required": [KEY_3]}}},
]


@dataclass(frozen=True)
class Call:
    name: str
    arguments: Mapping[str, Any]
    id: str

    def message(self) -> dict[str, Any]:
        return {"id": self.id, "type": "function",
                "function": {"name": self.name, "arguments": json.dumps(self.arguments, ensure_ascii=False)}}


CALL_1 = Call(NAME_1, {KEY_1: VALUE_1}, ID_1)
CALL_1_TWO_ARGS = Call(NAME_1, {KEY_1: VALUE_1, KEY_2: VALUE_2}, ID_1)
CALL_1_OTHER_ID = Call(NAME_1, {KEY_1: VALUE_1}, ID_ALT)
CALL_2 = Call(NAME_2, {KEY_3: VALUE_3}, ID_2)
CALL_2_FIRST = Call(NAME_2, {KEY_3: VALUE_3}, ID_1)


@dataclass(frozen=True)
class Variant:
    """One assistant message: content, reasoning, calls."""

    label: str
    content: str | None = None
    reasoning: str | None = None
    calls: tuple[Call, ...] = ()

    def messages(self, empty_content: Any) -> list[dict[str, Any]]:
        message: dict[str, Any] = {"role": "assistant",
                                   "content": self.content if self.content is not None else empty_content}
        if self.reasoning is not None:  # templates read one key or the other (Solar: ``reasoning``)
            message["reasoning_content"] = message["reasoning"] = self.reasoning
        if self.calls:
            message["tool_calls"] = [c.message() for c in self.calls]
        return [{"role": "user", "content": USER}, message]


CONTENT_ONLY = Variant("content", CONTENT)
CONTENT_OTHER = Variant("content-2", CONTENT_2)
WITH_REASONING = Variant("reasoning", CONTENT, REASONING)
ONE_CALL = Variant("one-call", calls=(CALL_1,))
TWO_CALLS = Variant("two-calls", calls=(CALL_1, CALL_2))
TWO_ARGS = Variant("two-args", calls=(CALL_1_TWO_ARGS,))
OTHER_NAME = Variant("other-name", calls=(CALL_2_FIRST,))
OTHER_ID = Variant("other-id", calls=(CALL_1_OTHER_ID,))
CONTENT_AND_CALL = Variant("content-and-call", CONTENT, calls=(CALL_1,))
CALL_VARIANTS = (ONE_CALL, TWO_CALLS, TWO_ARGS, OTHER_NAME, OTHER_ID, CONTENT_AND_CALL)

# the switches templates read (unknown ones are ignored by the others)
THINKING_ON: dict[str, Any] = {"enable_thinking": True, "thinking": True, "reasoning_effort": "high",
                               "thinking_mode": "enabled"}
THINKING_OFF: dict[str, Any] = {"enable_thinking": False, "thinking": False, "thinking_mode": "disabled"}
MODES: dict[str, dict[str, Any]] = {"default": {}, "on": THINKING_ON, "off": THINKING_OFF}


@dataclass
class Turn:
    """One variation, rendered: the prompt the model sees, and what it would write."""

    variant: Variant
    mode: str
    prompt: str
    full: str
    output: str


@dataclass
class Renderer:
    """Renders one template's variations; remembers failures (``errors``) instead of raising."""

    template: ChatTemplate
    errors: dict[str, str] = field(default_factory=dict)
    tools_render: bool = True  # False when the template fails whenever tools are given
    extra: dict[str, Any] = field(default_factory=dict)  # variables the template expects
    _cache: dict[tuple[str, bool, str, Any], str | None] = field(default_factory=dict)

    def __post_init__(self) -> None:
        probe = [{"role": "user", "content": USER}]
        if self._try(probe, True, {}, tools=True) is None:
            self.tools_render = False

    @property
    def tools(self) -> list[dict[str, Any]] | None:
        return TOOLS if self.tools_render else None

    def _try(self, messages: Sequence[Mapping[str, Any]], gen: bool, kwargs: Mapping[str, Any],
             tools: bool) -> str | None:
        for _ in range(4):
            try:
                return self.template.render(messages, TOOLS if tools else None, add_generation_prompt=gen,
                                            **self.extra, **kwargs)
            except TemplateError as exc:
                missing = re.search(r"'(\w+)' is undefined", str(exc))
                if missing is None or missing.group(1) in self.extra:
                    self.errors.setdefault(f"{'tools' if tools else 'no tools'}", str(exc))
                    return None
                self.extra[missing.group(1)] = ""
            except Exception as exc:  # noqa: BLE001 — a template must never crash the analysis
                self.errors.setdefault("render", f"{type(exc).__name__}: {exc}")
                return None
        return None

    def render(self, messages: Sequence[Mapping[str, Any]], gen: bool, mode: str, key: str) -> str | None:
        cache_key = (key, gen, mode, None)
        if cache_key not in self._cache:
            out = self._try(messages, gen, MODES[mode], tools=self.tools_render)
            if out is None:
                self.errors.setdefault(f"{key}/{mode}", "render failed")
            self._cache[cache_key] = out
        return self._cache[cache_key]

    def prompt(self, mode: str = "default") -> str | None:
        return self.render([{"role": "user", "content": USER}], True, mode, "prompt")

    def full(self, variant: Variant, mode: str = "default") -> str | None:
        """The conversation ending with ``variant``, without a generation prompt. Calls are sent
        with empty content, or with ``None`` where the template renders calls only then."""
        first = self.render(variant.messages(""), False, mode, f"{variant.label}:empty")
        if not variant.calls or variant.content is not None:
            return first
        if first is not None and variant.calls[0].name in first:
            return first
        second = self.render(variant.messages(None), False, mode, f"{variant.label}:none")
        if second is not None and variant.calls[0].name in second:
            return second
        return first

    def turn(self, variant: Variant, reference: Variant, mode: str = "default") -> Turn | None:
        """``variant``'s output, cut at the generation prompt and at the end of what depends on the
        message (found against ``reference``, a different message)."""
        prompt = self.prompt(mode)
        full = self.full(variant, mode)
        other = self.full(reference, mode)
        if prompt is None or full is None:
            return None
        start = prefix_len(prompt, full)
        # a tail of the prompt that the render repeats (the assistant header after appended text)
        tail = prompt[start:]
        rest = full[start:]
        for k in range(min(len(tail), len(rest), 128), 0, -1):
            if tail.endswith(rest[:k]) and is_markup(rest[:k]) and (k == len(rest) or not rest[k - 1].isalnum()):
                start += k
                break
        end = len(full) - (suffix_len(full, other) if other is not None and other != full else 0)
        output = full[start:max(start, end)]
        return Turn(variant, mode, prompt, full, output)
