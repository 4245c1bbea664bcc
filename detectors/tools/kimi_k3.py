"""Kimi K3 "XTML" tool calls: elements written with ``<|open|>``/``<|close|>``/``<|sep|>`` tokens.

    <|open|>tools<|sep|>
      <|open|>call tool="get_weather" index="1"<|sep|>
        <|open|>argument key="city" type="string"<|sep|>Paris<|close|>argument<|sep|>
      <|close|>call<|sep|>
    <|close|>tools<|sep|>

Names and keys are XML-escaped attribute values; ``type`` gives each argument's JSON type. An
argument's closing element counts only where the next argument or the end of the call follows
it, so the marker text itself may appear inside a value.

The answer sits in a ``response`` element (``<|open|>response<|sep|>…<|close|>response<|sep|>``)
and the message ends with ``<|close|>message<|sep|><|end_of_msg|>`` (Kimi-K3.jinja): the response
envelope and the message close are the format's content markup, dropped from the content with or
without the ``kimi_k3`` reasoning parser; ``<|end_of_msg|>`` at the end is an end-of-turn token.
"""

from __future__ import annotations

from detectors.turns import KIMI_K3
from parsers.declare import ToolCallDetector, XmlArgs, XmlCallShape, tagged_xml

OPEN, CLOSE, SEP = "<|open|>", "<|close|>", "<|sep|>"
TOOLS = (f"{OPEN}tools{SEP}", f"{CLOSE}tools{SEP}")
#: the answer's envelope and the end of the message
RESPONSE = (f"{OPEN}response{SEP}", f"{CLOSE}response{SEP}", f"{CLOSE}message{SEP}")
SHAPE = XmlCallShape(
    name_end=(SEP,), name_attribute="tool", call_end=f"{CLOSE}call{SEP}",
    args=XmlArgs(f"{OPEN}argument", SEP, f"{CLOSE}argument{SEP}", key_attribute="key", type_attribute="type",
                 value_end_follow=(f"{OPEN}argument", f"{CLOSE}call")),
)


class KimiK3(ToolCallDetector):
    end_tokens = KIMI_K3
    # written compact: a closing ``argument`` element counts only right before the next element
    format = tagged_xml(f"{OPEN}call", SHAPE, section=TOOLS, newlines=False,
                        attributes=' index="$ordinal"').with_content_markup(*RESPONSE)
