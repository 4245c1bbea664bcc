"""Muse Glimmer tool calls, reasoning and content: recipient-addressed messages, ATEM invokes.

The generation prompt ends with ``<|start|>assistant``; the model writes the rest of each header::

     to=self<|message|>Need the weather.<|eom|><|start|>assistant to=get_weather<|message|><atem:function_calls>
    <atem:invoke name="get_weather">
    <atem:parameter name="city">Paris</atem:parameter>
    </atem:invoke>
    </atem:function_calls><|eot|>

→ reasoning ``Need the weather.``, one call ``get_weather({"city": "Paris"})``. ``to=self`` is
reasoning, ``to=user`` / ``to=commentary`` (or no recipient) content; any other recipient is a tool
message whose ATEM invokes are the calls (parameter values typed by the tool's schema; a doubled
namespace such as ``get_weather.get_weather`` is the offered ``get_weather``). It runs on the Harmony
message loop (``parsers.shapes.harmony``, dialect ``MUSE``) and carries its own reasoning.
"""

from __future__ import annotations

from parsers.declare import MUSE, ToolCallDetector, harmony


class Muse(ToolCallDetector):
    format = harmony(MUSE)
