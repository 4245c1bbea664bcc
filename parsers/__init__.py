"""toolwire's parsing library: reasoning and tool calls out of raw model text, streamed.

Usable on its own (it imports nothing from the HTTP layer)::

    from parsers import FunctionCallParser, ReasoningParser

Inside: ``core`` (streaming primitives), ``shapes`` (format shapes and their builders),
``format`` / ``wire`` (a format declared once: how it is read and how it writes calls),
``declare`` (everything a detector author imports), the parser surfaces (``function_call``,
``reasoning``, ``response``), the event types and the registry of detectors (``detectors/``).
"""

from parsers.events import CallArgs, CallEnd, CallStart, Content, Event, Reasoning
from parsers.fold import FoldedCall, FoldedMessage, fold
from parsers.function_call import FunctionCallParser, ToolCallDetector, ToolCallItem
from parsers.reasoning import ReasoningDetector, ReasoningParser
from parsers.registry import (
    UnknownParserError,
    canonical_reasoning_parser,
    canonical_tool_parser,
    reasoning_parser_names,
    tool_parser_names,
)
from parsers.response import ResponseParser, build_response_parser
from parsers.tools import ToolSpec, to_specs

__all__ = [
    "CallArgs", "CallEnd", "CallStart", "Content", "Event", "FoldedCall", "FoldedMessage",
    "FunctionCallParser", "Reasoning", "ReasoningDetector", "ReasoningParser", "ResponseParser",
    "ToolCallDetector", "ToolCallItem", "ToolSpec", "UnknownParserError", "build_response_parser",
    "canonical_reasoning_parser",
    "canonical_tool_parser", "fold", "reasoning_parser_names", "to_specs", "tool_parser_names",
]
