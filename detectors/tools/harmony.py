"""gpt-oss (OpenAI Harmony) tool calls, reasoning and content, parsed from text as one program.

The generation prompt ends with ``<|start|>assistant``; the output is a sequence of messages::

    <|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant to=functions.get_weather<|channel|>commentary <|constrain|>json<|message|>{"city": "Paris"}

→ reasoning ``Need the weather.``, one call ``get_weather({"city": "Paris"})`` (its ``<|call|>``
stop token is normally not in the text). The recipient may also follow the channel
(``<|channel|>commentary to=functions.get_weather``); the content type may be ``<|constrain|>json``
with or without a space before it, or a bare `` json``. ``commentary`` without a recipient is a
user-visible preamble (content), ``final`` is content. Calls to built-in tools (``python``,
``browser.*``) are dropped. Details and the malformed-output policy: ``parsers.shapes.harmony``.

The format carries its own reasoning (``handles_reasoning``): no separate reasoning parser runs,
and ``prepare(prompt)`` reads the start state from the prompt's tail.
"""

from __future__ import annotations

from parsers.declare import HARMONY, ToolCallDetector, harmony


class GptOss(ToolCallDetector):
    format = harmony(HARMONY)
