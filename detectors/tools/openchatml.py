"""OpenChatML 2.2: the Harmony-compatible plain-text envelope (spec: QuixiAI/OpenChatML README.md).

    <|start|>assistant to=functions.get_current_weather call_id=wx1<|channel|>commentary<|constrain|>json<|message|>{"location":"Tokyo"}<|call|>

→ call ``get_current_weather`` with id ``wx1``. Differences from Harmony (``detectors.tools.harmony``):

* ``call_id=`` in the header is the tool call id;
* ``commentary`` without a recipient is hidden (reasoning) unless the header says
  ``intent=preamble`` (in the role part or after the channel), which makes it content;
* ``<|literal|>…<|endliteral|>`` in a text body is opaque: its text passes through, markers included
  (the two delimiters are dropped);
* outside a literal block ``<`` + a control token is that token's text: ``<<|start|>`` → ``<|start|>``;
* a message without a channel is ``final`` (as in Harmony here).
"""

from __future__ import annotations

from parsers.declare import OPENCHATML, ToolCallDetector, harmony


class OpenChatML(ToolCallDetector):
    format = harmony(OPENCHATML)
