"""IQuest Q1 tool calls: GLM-4.7's compact key/value pairs inside ``<iquest_tool_call>``.

    <iquest_tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value></iquest_tool_call>

The name runs up to the first ``<arg_key>`` (a newline after it is tolerated); values are typed by
the tool's JSON schema: string parameters are taken as written, others are JSON (text that does
not parse stays a string). The generation prompt (``<|iquest_assistant|><think>``) opens the
reasoning block, read by the ``iquest_q1`` reasoning parser (``<think>…</think>``).
"""

from __future__ import annotations

from parsers.declare import ToolCallDetector, XmlArgs, XmlCallShape, tagged_xml

CALL, CALL_END = "<iquest_tool_call>", "</iquest_tool_call>"
SHAPE = XmlCallShape(
    name_end=("\n", "<arg_key>", CALL_END),
    call_end=CALL_END,
    args=XmlArgs("<arg_key>", "</arg_key>", "</arg_value>", value_start="<arg_value>",
                 value_breaks=(CALL_END,), value_break_follow=("\n", CALL)),
)


class IQuestQ1(ToolCallDetector):
    format = tagged_xml(CALL, SHAPE, newlines=False)
