"""Constrained decoding for tool calls and structured answers, in each backend's dialect.

``build_constraint`` turns the request's ``tool_choice`` / ``parallel_tool_calls`` /
``response_format`` and the active detector's wire format into:

* ``fields`` — merged into the backend request body:
  - llama.cpp: a GBNF ``grammar`` in the detector's own wire format generated from the tools' JSON
    schemas (``required``/named: the whole output, after an optional reasoning block; ``auto``:
    ``grammar_lazy`` with a WORD ``grammar_triggers`` entry on the format's start marker), or
    ``json_schema`` for ``response_format``;
  - vLLM: ``structured_outputs`` — ``json`` (an array of calls for ``required``, the named tool's
    arguments for a named choice), ``structural_tag`` (begin/schema/end per tool, triggered by the
    start marker) for ``auto`` with strict tools, ``json``/``json_object`` for ``response_format``;
    the legacy ``guided_json`` / ``guided_grammar`` fields when ``legacy_vllm`` is set;
  - generic OpenAI completions: nothing (``required`` is then best effort).

  A format without a wire, or whose arguments encoding has no grammar (``wire.grammar_supported``),
  is not constrained on llama.cpp; nor is ``auto`` for a format without a trigger word (a bare
  list or name: a lazy grammar would fire on any bracket). Grammars spell values in the wire's own
  syntax (JSON, XML-style parameters, Python literals, object notation: ``app.constraints.gbnf``).
* ``output`` — what the constrained output looks like, so the right parser reads it: the
  detector's own format (``"wire"``), a JSON array of calls (``"json_array"``), or one arguments
  object for the named tool (``"named_args"``).
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from string import Template
from typing import Any

from app.constraints.gbnf import JSON, PYTHON, Grammar, Syntax, literal, object_notation
from parsers.core.args import param_kind, resolve_ref
from parsers.reasoning import ReasoningDetector
from parsers.shapes.nestedxml import NestedXml
from parsers.tools import ToolSpec
from parsers.wire import JsonArgs, ObjectNotation, PythonKwargs, WireFormat, XmlParams

WORD_TRIGGER = 1  # llama.cpp COMMON_GRAMMAR_TRIGGER_TYPE_WORD
INDEX_GBNF = {"$index": "[0-9]{1,3}", "$ordinal": "[1-9] [0-9]{0,2}"}


@dataclass
class Constraint:
    fields: dict[str, Any] = field(default_factory=dict)
    output: str = "wire"  # "wire" | "json_array" | "named_args"
    max_calls: int | None = None  # enforced on the parsed output too (parallel_tool_calls: false)
    #: the JSON output comes after a free reasoning block the prompt opened (vLLM structural tag)
    reasoning_first: bool = False


@dataclass(frozen=True)
class ReasoningGate:
    """A reasoning block the grammar must leave free: ``inside`` when the prompt already opened it."""

    start: str
    end: str
    inside: bool

    @classmethod
    def of(cls, detector: ReasoningDetector | None, inside: bool) -> ReasoningGate | None:
        if detector is None or not detector.start:
            return None
        return cls(detector.start[0], detector.ends()[0], inside)


def _object_schema(tool: ToolSpec) -> Mapping[str, Any]:
    params = tool.parameters
    if not params:
        return {"type": "object", "properties": {}}
    return params


# ---------------------------------------------------------------------------------------- GBNF


def _template_gbnf(text: str) -> str:
    """A literal template fragment (``$name`` already filled) as GBNF, ``$index`` / ``$ordinal`` as digits."""
    out: list[str] = []
    for piece in re.split(r"(\$index|\$ordinal)", text):
        if piece in INDEX_GBNF:
            out.append(INDEX_GBNF[piece])
        elif piece:
            out.append(literal(piece))
    return " ".join(out) if out else '""'


def _syntax(wire: WireFormat) -> Syntax:
    """The value syntax of a wire's arguments."""
    if isinstance(wire.args, PythonKwargs):
        return PYTHON
    if isinstance(wire.args, ObjectNotation):
        return object_notation(wire.args.delim)
    return JSON


def _xml_args(g: Grammar, params: XmlParams, tool: ToolSpec, name: str) -> str:
    schema = _object_schema(tool)
    props = schema.get("properties") if isinstance(schema, Mapping) else None
    if not isinstance(props, Mapping) or not props:
        return '""'
    required = set(schema.get("required", [])) if isinstance(schema, Mapping) else set()
    before_t, _, after_t = params.param.partition("$value")
    parts = []
    for key, prop in props.items():
        kind, _ = param_kind(prop if isinstance(prop, Mapping) else None)
        is_string = kind == "string"
        values = {"key": html.escape(key) if params.escape_keys else key, "is_string": str(is_string).lower(),
                  "type": kind}
        before = Template(before_t).safe_substitute(values)
        after = Template(after_t).safe_substitute(values)
        enum = prop.get("enum") if isinstance(prop, Mapping) else None
        if is_string and isinstance(enum, list) and enum and all(isinstance(v, str) for v in enum):
            value = g.add(f"{name}-{key}-enum", " | ".join(literal(v) for v in enum))
        elif is_string:
            value = g.text_until(params.string_end, f"{name}-{key}-text")
        else:
            value = g.schema(prop, f"{name}-{key}")
        if params.cdata and is_string:
            value = f'"<![CDATA[" {value} "]]>"'
        param = g.add(f"{name}-{key}-param", f"{literal(before)} {value} {literal(after)}")
        parts.append(param if key in required else f"{param}?")
    return " ".join(parts)


def _nested_value(g: Grammar, enc: NestedXml, schema: Any, root: Mapping[str, Any], name: str, depth: int) -> str:
    """A rule for one nested-element value typed by ``schema``: text for strings (and for what
    the schema leaves open), JSON spellings for scalars, child elements for objects and arrays."""
    prefix = enc.shape.prefix
    resolved = resolve_ref(schema, root)
    kind, _ = param_kind(resolved, root)
    if resolved is None or depth > 8:
        return g.text_until(prefix, f"{name}-text")
    if kind == "string":
        enum = resolved.get("enum")
        if isinstance(enum, list) and enum and all(isinstance(v, str) for v in enum):
            return g.add(f"{name}-enum", " | ".join(literal(v) for v in enum))
        return g.text_until(prefix, f"{name}-text")
    if kind == "array":
        items = resolved.get("items")
        element = _nested_value(g, enc, items if isinstance(items, Mapping) else None, root, f"{name}-item", depth + 1)
        item = enc.shape.item
        return g.add(f"{name}-items", f"( {literal(f'{prefix}<{item}>')} {element} {literal(f'{prefix}</{item}>')} )*")
    if kind == "object":
        props = resolved.get("properties")
        if not isinstance(props, Mapping) or not props:
            return '""'
        required = set(resolved.get("required", []))
        parts = []
        for key, prop in props.items():
            value = _nested_value(g, enc, prop, root, f"{name}-{key}", depth + 1)
            child = g.add(f"{name}-{key}-el", f"{literal(f'{prefix}<{key}>')} {value} {literal(f'{prefix}</{key}>')}")
            parts.append(child if key in required else f"{child}?")
        return " ".join(parts)
    return g.schema(resolved, f"{name}-value")


def _nested_args(g: Grammar, enc: NestedXml, tool: ToolSpec, name: str) -> str:
    root = _object_schema(tool)
    return _nested_value(g, enc, root, root, name, 0)


def call_rule(g: Grammar, wire: WireFormat, tools: Sequence[ToolSpec]) -> str:
    """A rule for one call of any of ``tools`` in the wire format."""
    alternatives = []
    for i, tool in enumerate(tools):
        name = f"call-{i}-{tool.name}"
        before, after = (Template(s).safe_substitute(name=tool.name) for s in wire.call_parts)
        if isinstance(wire.args, XmlParams):
            args = _xml_args(g, wire.args, tool, name)
        elif isinstance(wire.args, NestedXml):
            args = _nested_args(g, wire.args, tool, name)
        else:
            args = g.arguments(_object_schema(tool), f"{name}-args")
        alternatives.append(g.add(name, f"{_template_gbnf(before)} {args} {_template_gbnf(after)}"))
    return g.add("call", " | ".join(alternatives))


def calls_grammar(wire: WireFormat, tools: Sequence[ToolSpec], max_calls: int | None,
                  reasoning: ReasoningGate | None = None, lazy: bool = False) -> str:
    """GBNF for one or more calls in the wire format. ``lazy`` grammars start at the trigger word
    (llama.cpp applies them from there), so they carry no reasoning prefix."""
    g = Grammar(_syntax(wire))
    call = call_rule(g, wire, tools)
    sep = literal(wire.separator) + " " if wire.separator else ""
    if max_calls == 1:
        calls = call
    else:
        more = f"{{0,{max_calls - 1}}}" if max_calls else "*"
        calls = f"{call} ( {sep}{call} ){more}"
    body = " ".join(p for p in (literal(wire.section[0]) if wire.section[0] else "", calls,
                                literal(wire.section[1]) if wire.section[1] else "") if p)
    if reasoning is not None and not lazy:
        thought = g.text_until(reasoning.end, "reasoning-text")
        ws = g.primitive("ws-lines")
        block = f"{thought} {literal(reasoning.end)} {ws}"
        if not reasoning.inside:
            block = f"( {literal(reasoning.start)} {block} )?"
        body = f"{block} {body}"
    return g.render(g.add("tool-calls", body))


# ------------------------------------------------------------------------------- JSON schemas


def calls_array_schema(tools: Sequence[ToolSpec], max_calls: int | None) -> dict[str, Any]:
    """``[{"name": …, "arguments": {…}}, …]`` — the JSON form of one or more calls."""
    items = [{
        "type": "object",
        "properties": {"name": {"type": "string", "const": t.name}, "arguments": _object_schema(t)},
        "required": ["name", "arguments"],
        "additionalProperties": False,
    } for t in tools]
    schema: dict[str, Any] = {"type": "array", "items": {"anyOf": items} if len(items) > 1 else items[0],
                              "minItems": 1}
    if max_calls:
        schema["maxItems"] = max_calls
    return schema


def structural_tag(wire: WireFormat, tools: Sequence[ToolSpec]) -> dict[str, Any]:
    """vLLM/xgrammar structural tag: each call's begin/schema/end, applied once the trigger appears."""
    structures = []
    for tool in tools:
        before, after = wire.split_call(tool.name, 0)
        structures.append({"begin": before, "schema": _object_schema(tool), "end": after})
    return {"type": "structural_tag", "structures": structures, "triggers": [wire.trigger]}


# ------------------------------------------------------------------------------------ planner


@dataclass(frozen=True)
class ConstraintRequest:
    """What one request asks the backend to enforce, in no backend's dialect.

    ``mode`` is ``none`` / ``auto`` / ``required`` / ``named`` (``tools`` then holds only the named
    tool); ``wire`` is the active tool format's (``None``: no format, or one that cannot be written
    by a grammar); ``reasoning`` a block the grammar must leave free; ``legacy_vllm`` asks for vLLM's
    pre-0.12 ``guided_*`` fields."""

    mode: str
    tools: tuple[ToolSpec, ...] = ()
    wire: WireFormat | None = None
    max_calls: int | None = None
    reasoning: ReasoningGate | None = None
    response_format: Mapping[str, Any] | None = None
    legacy_vllm: bool = False

    @classmethod
    def of(cls, tool_choice: str | None, named_tool: str | None, tools: Sequence[ToolSpec], wire: WireFormat | None,
           parallel: bool, reasoning: ReasoningGate | None = None, response_format: Mapping[str, Any] | None = None,
           legacy_vllm: bool = False) -> ConstraintRequest:
        mode = "named" if named_tool else (tool_choice or ("auto" if tools else "none"))
        if named_tool:
            tools = [t for t in tools if t.name == named_tool]
        max_calls = 1 if named_tool or not parallel else None
        return cls(mode, tuple(tools), wire, max_calls, reasoning, response_format, legacy_vllm)


def unconstrained(request: ConstraintRequest) -> Constraint:
    """Generic OpenAI completions APIs: nothing to send (``required`` is best effort)."""
    return Constraint(max_calls=request.max_calls)


def llamacpp_constraint(request: ConstraintRequest) -> Constraint:
    """llama.cpp: GBNF in the tool format's own wire format, or ``json_schema`` for a response format."""
    constraint = Constraint(max_calls=request.max_calls)
    wire, tools, mode = request.wire, request.tools, request.mode
    if mode == "none" or not tools or wire is None or not wire.grammar_supported \
            or (mode == "auto" and not wire.trigger):  # a lazy grammar needs a trigger word
        return _response_format(constraint, "llamacpp", request.response_format, False)
    if mode in ("required", "named"):
        constraint.fields = {"grammar": calls_grammar(wire, tools, request.max_calls, request.reasoning),
                             "grammar_lazy": False}
    elif request.response_format and request.response_format.get("type") != "text":
        return _response_format(constraint, "llamacpp", request.response_format, False)
    else:
        constraint.fields = {
            "grammar": calls_grammar(wire, tools, request.max_calls, lazy=True), "grammar_lazy": True,
            "grammar_triggers": [{"type": WORD_TRIGGER, "value": wire.trigger}],
        }
    return constraint


def vllm_constraint(request: ConstraintRequest) -> Constraint:
    """vLLM: ``structured_outputs`` (or the legacy ``guided_json``): a JSON array of calls for
    ``required``, the tool's arguments for a named tool, a structural tag for strict tools."""
    constraint = Constraint(max_calls=request.max_calls)
    tools, legacy = request.tools, request.legacy_vllm
    if request.mode == "none" or not tools:
        return _response_format(constraint, "vllm", request.response_format, legacy)
    if request.mode in ("required", "named"):
        named = request.mode == "named"
        constraint.output = "named_args" if named else "json_array"
        schema = dict(_object_schema(tools[0])) if named else calls_array_schema(tools, request.max_calls)
        gate = request.reasoning
        if gate is not None and gate.inside and not legacy:  # the model thinks, then writes the JSON
            tag = {"type": "structural_tag", "format": {"type": "sequence", "elements": [
                {"type": "tag", "begin": "", "content": {"type": "any_text"}, "end": gate.end},
                {"type": "json_schema", "json_schema": schema}]}}
            constraint.fields = {"structured_outputs": {"structural_tag": json.dumps(tag, ensure_ascii=False)}}
            constraint.reasoning_first = True
            return constraint
        constraint.fields = {"guided_json": schema} if legacy else {"structured_outputs": {"json": schema}}
        return constraint
    if request.response_format and request.response_format.get("type") != "text":
        return _response_format(constraint, "vllm", request.response_format, legacy)
    wire = request.wire
    if any(t.strict for t in tools) and wire is not None and isinstance(wire.args, JsonArgs) and wire.trigger \
            and not legacy:
        tag = structural_tag(wire, [t for t in tools if t.strict] or tools)
        constraint.fields = {"structured_outputs": {"structural_tag": json.dumps(tag, ensure_ascii=False)}}
    return constraint


DIALECTS = {"llamacpp": llamacpp_constraint, "vllm": vllm_constraint, "openai": unconstrained}


def build_constraint(
    backend_kind: str,
    tool_choice: str | None,
    named_tool: str | None,
    tools: Sequence[ToolSpec],
    wire: WireFormat | None,
    parallel: bool,
    reasoning: ReasoningGate | None = None,
    response_format: Mapping[str, Any] | None = None,
    legacy_vllm: bool = False,
) -> Constraint:
    """The backend fields and output shape for one request in a backend's dialect (the backends
    call their dialect themselves: ``Backend.constrain``; this is the same, by name)."""
    request = ConstraintRequest.of(tool_choice, named_tool, tools, wire, parallel, reasoning, response_format,
                                   legacy_vllm)
    return DIALECTS[backend_kind](request)


def _response_format(constraint: Constraint, backend_kind: str, response_format: Mapping[str, Any] | None,
                     legacy_vllm: bool) -> Constraint:
    if not response_format or response_format.get("type") in (None, "text") or backend_kind == "openai":
        return constraint
    schema: Any = {"type": "object"}
    if response_format.get("type") == "json_schema":
        spec = response_format.get("json_schema") or {}
        schema = spec.get("schema") or {"type": "object"}
    if backend_kind == "llamacpp":
        constraint.fields = {"json_schema": schema}
    elif legacy_vllm:
        constraint.fields = {"guided_json": schema}
    elif response_format.get("type") == "json_object":
        constraint.fields = {"structured_outputs": {"json_object": True}}
    else:
        constraint.fields = {"structured_outputs": {"json": schema}}
    return constraint
