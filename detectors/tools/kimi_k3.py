"""Kimi K3 "XTML" tool calls: elements written with ``<|open|>``/``<|close|>``/``<|sep|>`` tokens.

    <|open|>tools<|sep|>
      <|open|>call tool="get_weather" index="1"<|sep|>
        <|open|>argument key="city" type="string"<|sep|>Paris<|close|>argument<|sep|>
      <|close|>call<|sep|>
    <|close|>tools<|sep|>

Names and keys are XML-escaped attribute values; ``type`` gives each argument's JSON type. An
argument's closing element counts only where the next argument or the end of the call follows
it, so the marker text itself may appear inside a value.
"""

from __future__ import annotations

from detectors.turns import KIMI_K3
from parsers.declare import ToolCallDetector, XmlArgs, XmlCallShape, tagged_xml

OPEN, CLOSE, SEP = "<|open|>", "<|close|>", "<|sep|>"
TOOLS = (f"{OPEN}tools{SEP}", f"{CLOSE}tools{SEP}")
SHAPE = XmlCallShape(
    name_end=(SEP,), name_attribute="tool", call_end=f"{CLOSE}call{SEP}",
    args=XmlArgs(f"{OPEN}argument", SEP, f"{CLOSE}argument{SEP}", key_attribute="key", type_attribute="type",
                 value_end_follow=(f"{OPEN}argument", f"{CLOSE}call")),
)


class KimiK3(ToolCallDetector):
    # written compact: a closing ``argument`` element counts only right before the next element
    end_tokens = KIMI_K3
    format = tagged_xml(f"{OPEN}call", SHAPE, section=TOOLS, newlines=False, attributes=' index="$ordinal"')
