"""ByteDance Seed-OSS tool calls: Qwen3-Coder-style XML inside ``<seed:tool_call>``, one per call.

    I'll check both cities.
    <seed:tool_call>
    <function=get_weather>
    <parameter=city>Paris</parameter>
    <parameter=days>3</parameter>
    </function>
    </seed:tool_call>

A value is exactly the text between ``<parameter=…>`` and ``</parameter>``: the template writes
``arg_value`` there as it is, with no padding, so a value's own leading or trailing newlines,
quotes and backslashes are the value's (values may span lines). Values are typed by the tool's
JSON schema; the template renders non-string values with Jinja's ``string`` filter, so Python
literals (``True``, ``{'a': 1}``) are accepted.
A bare ``<function=…>`` without the wrapper is accepted, as vLLM's parser does.
"""

from __future__ import annotations

from detectors.turns import SEED_OSS
from parsers.declare import ToolCallDetector, XmlArgs, XmlCallShape, wrapped_xml

TOOL_CALL, TOOL_CALL_END, FUNCTION = "<seed:tool_call>", "</seed:tool_call>", "<function="
SHAPE = XmlCallShape(name_end=(">",), call_end="</function>",
                     args=XmlArgs("<parameter=", ">", "</parameter>",
                                  value_breaks=("\n<parameter=", "\n</function>")))


class SeedOss(ToolCallDetector):
    end_tokens = SEED_OSS
    format = wrapped_xml((TOOL_CALL, TOOL_CALL_END), FUNCTION, SHAPE)
