"""Everything a detector author needs, in one import::

    from parsers.declare import ToolCallDetector, tagged_json

    class Qwen25(ToolCallDetector):
        format = tagged_json(start="<tool_call>", end="</tool_call>", separator="\\n")

A tool-call detector declares one ``ToolFormat``: built by a shape builder (``tagged_json``,
``named_json``, ``tagged_xml``, ``wrapped_xml``, ``json_list``, ``object_notation``, ``harmony``,
``generic``) or — for formats that need code — a ``ToolFormat`` around the format's own program
(``read``), written in the cursor primitives and the shapes' readers below, with its markers and
its ``WireFormat`` declared beside it. A reasoning detector sets ``ReasoningDetector``'s class
attributes (and overrides ``make_program`` when it needs code).

This module only re-exports; the names live in ``parsers.core`` (primitives), ``parsers.shapes``
(format shapes), ``parsers.format`` / ``parsers.wire`` (the declaration types) and the parser modules.
"""

from parsers.core.args import (
    JSON,
    ArgsObject,
    ArgType,
    StringValue,
    arg_type,
    convert_value,
    escape,
    param_kind,
    resolve_ref,
    schema_type,
    typed_value,
)
from parsers.core.channels import TextChannel
from parsers.core.cursor import Cursor, Write, discard, separated
from parsers.core.driver import CallWriter, Out, Program, is_json_object
from parsers.core.markers import MarkerSet
from parsers.format import CallContext, Read, ReadCall, ToolFormat
from parsers.function_call import ToolCallDetector
from parsers.reasoning import HarmonyReasoning, ReasoningDetector
from parsers.shapes.blocks import INKLING, Blocks, blocks_program, start_kind, typed_blocks
from parsers.shapes.generic import GenericFormat, generic
from parsers.shapes.harmony import (
    ANALYSIS_BODY,
    BEAM,
    CHANNEL,
    END,
    EOM,
    EOT,
    GENERATION_PROMPT,
    HARMONY,
    MESSAGE,
    MUSE,
    OPENCHATML,
    START,
    CallBody,
    Dialect,
    Start,
    dialect_wire,
    harmony,
    harmony_program,
    parse_header,
    start_from_prompt,
)
from parsers.shapes.jsoncall import (
    DEFAULT_SHAPE,
    JsonCallShape,
    call_template,
    json_args_object,
    json_call,
    json_call_list,
    json_calls,
    tagged_json,
)
from parsers.shapes.listcalls import Opener, json_block, json_list, starts_with_list
from parsers.shapes.namedcall import NamedJsonShape, named_json, named_json_call
from parsers.shapes.nestedxml import NestedXml, NestedXmlShape, nested_xml, nested_xml_call
from parsers.shapes.objnotation import ObjNotationShape, object_notation
from parsers.shapes.pythonic import (
    CALL_NAME,
    call_head,
    peek_past_ws,
    python_call_lines,
    python_call_list,
    python_list_wire,
)
from parsers.shapes.sections import Section, Sections, calls_format, marker_calls, section_calls
from parsers.shapes.xmlcall import (
    XmlArgs,
    XmlCallShape,
    tagged_xml,
    wrapped_xml,
    xml_call,
    xml_call_template,
    xml_params,
    xml_params_until,
    xml_wire,
)
from parsers.tools import ToolSpec
from parsers.wire import (
    JSON_ARGS,
    PYTHON_KWARGS,
    ArgsEncoding,
    JsonArgs,
    ObjectNotation,
    PythonKwargs,
    WireFormat,
    XmlParams,
    lit,
)

__all__ = [  # noqa: RUF022 — grouped by what a detector author looks for, not sorted
    # declarations
    "ToolCallDetector", "ReasoningDetector", "HarmonyReasoning", "ToolFormat", "CallContext", "Read", "ReadCall", "ToolSpec",
    # how a format writes calls
    "WireFormat", "ArgsEncoding", "JsonArgs", "JSON_ARGS", "XmlParams", "PythonKwargs", "PYTHON_KWARGS",
    "ObjectNotation", "NestedXml", "lit",
    # shape builders (a whole format from one spelling)
    "tagged_json", "named_json", "tagged_xml", "wrapped_xml", "nested_xml", "json_list", "object_notation", "harmony",
    "generic", "typed_blocks",
    "calls_format", "marker_calls",
    # shape data
    "JsonCallShape", "DEFAULT_SHAPE", "NamedJsonShape", "XmlArgs", "XmlCallShape", "NestedXmlShape", "Opener", "ObjNotationShape",
    "GenericFormat", "Section", "Sections", "Dialect", "CallBody", "Start", "Blocks", "INKLING",
    # shape readers, for formats that need code
    "json_call", "json_calls", "json_call_list", "json_args_object", "call_template", "named_json_call", "xml_call", "nested_xml_call",
    "xml_params", "xml_params_until", "xml_wire", "xml_call_template", "section_calls", "python_call_list", "python_call_lines", "CALL_NAME", "json_block",
    "call_head", "peek_past_ws", "python_list_wire", "starts_with_list", "harmony_program", "dialect_wire", "parse_header",
    "start_from_prompt", "blocks_program", "start_kind",
    "HARMONY", "OPENCHATML", "MUSE", "BEAM", "START", "END", "EOM", "EOT", "CHANNEL", "MESSAGE", "GENERATION_PROMPT",
    "ANALYSIS_BODY",
    # primitives
    "Cursor", "Write", "discard", "separated", "MarkerSet", "TextChannel", "Out", "CallWriter", "Program",
    "is_json_object", "ArgsObject", "StringValue", "escape", "arg_type", "ArgType", "JSON", "param_kind", "schema_type",
    "convert_value", "typed_value", "resolve_ref",
]
