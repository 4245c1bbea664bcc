"""Beam tool calls, reasoning and content: a Harmony-like envelope with XML-style call bodies.

The generation prompt ends with ``<|start|>assistant``; the output is a sequence of messages::

    <|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant to=get_weather<|channel|>analysis <|constrain|>xml<|message|><rfl:parameter name="city">
    Paris
    </rfl:parameter><|call|>

→ reasoning ``Need the weather.``, one call ``get_weather({"city": "Paris"})``. The recipient is
the function's bare name; a call's body is one ``<rfl:parameter name="K">`` per argument, its value
between a newline after the tag and one before ``</rfl:parameter>`` (a value also ends where the
next parameter opens), typed by the tool's JSON schema. ``analysis`` messages are reasoning,
``final`` ones content (``<|channel|>final<|message|>…<|return|>``). ``<|call|>`` is usually a stop
token, so the end of the output closes the last call. Everything else — headers, terminators,
malformed output — is the Harmony program's (``parsers.shapes.harmony``, dialect ``BEAM``, which
also says how calls are written and that ``<|constrain|>xml<|message|>`` shows one).

The format carries its own reasoning (``handles_reasoning``); the ``beam`` reasoning parser runs the
same program without calls.
"""

from __future__ import annotations

from parsers.declare import BEAM, ToolCallDetector, harmony


class Beam(ToolCallDetector):
    format = harmony(BEAM)
