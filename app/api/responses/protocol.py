"""OpenAI Responses API requests (what clients send us): the top-level fields, typed, and the
tools, turned into the function tools the model is offered; ``Parsed``, a request read whole.

Unknown top-level fields are accepted and ignored (Codex sends ``client_metadata``,
``prompt_cache_key``, …); known ones are type checked, and a problem is a 400 in OpenAI's error
shape that names the field (the body is read whole by ``app.api.responses.parse``). Input items are
read by ``app.api.responses.decode``.

Tools, as the model sees them (``offered_tools``):

* ``function`` tools are offered as they are;
* ``custom`` tools (free-form input, e.g. Codex's ``apply_patch``) are offered as functions with one
  string parameter ``input``; a grammar or format the tool declares is shown in the description;
* a ``namespace`` groups function and custom tools: each is offered as ``NAMESPACE__NAME`` and its
  calls go back as ``function_call`` / ``custom_tool_call`` items with ``name`` and ``namespace``;
* hosted tools toolwire cannot run (``web_search``, ``file_search``, ``computer_use``, …) are left out
  of the prompt with a warning (``--hosted-tools reject`` makes them a 400).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Literal

from pydantic import Field

from app.api.protocol import Lenient
from app.bodies import Elements
from app.errors import bad_request
from app.pipeline.ask import Tool
from app.pipeline.validate import MAX_SCHEMA_NESTING, TOOL_NAME_RULE, nesting, tool_name_problem

NAMESPACE_SEPARATOR = "__"
CUSTOM_INPUT = "input"  # the one parameter of a custom tool offered as a function


class ReasoningConfig(Lenient):
    effort: str | None = None
    summary: str | None = None
    generate_summary: str | None = None


class TextConfig(Lenient):
    format: dict[str, Any] | None = None


class ResponsesRequest(Lenient):
    model: str | None = None
    input: str | list[Any] | None = None
    instructions: str | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    max_output_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, ge=0, le=1)
    reasoning: ReasoningConfig | None = None
    text: TextConfig | None = None
    store: bool | None = None
    previous_response_id: str | None = None
    conversation: str | dict[str, Any] | None = None
    include: list[str] | None = None
    metadata: dict[str, Any] | None = None
    stream: bool = False
    background: bool | None = None
    truncation: str | None = None
    user: str | None = None


# ------------------------------------------------------------------------------------- tools

HOSTED = frozenset({"web_search", "web_search_preview", "web_search_2025_08_26", "web_search_preview_2025_03_11",
                    "file_search", "computer_use", "computer_use_preview", "code_interpreter", "image_generation",
                    "mcp", "local_shell", "shell", "apply_patch", "tool_search"})
#: families of hosted tools whose dated variants keep coming (``web_search_preview_2025_03_11``, …)
HOSTED_FAMILIES = ("web_search", "computer_use")


def hosted_name(kind: str) -> str | None:
    """The hosted tool ``kind`` names, as toolwire knows it — a name from ``HOSTED``, or the family
    of a variant it does not know — or ``None`` for a tool that is not hosted. Only these names are
    echoed (in a warning header, a log line, an error): never the client's own string."""
    if kind in HOSTED:
        return kind
    return next((family for family in HOSTED_FAMILIES if kind.startswith(family)), None)


def shown(value: Any, limit: int = 40) -> str:
    """``value`` as an error message quotes it: its repr, cut to ``limit`` characters."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "…"


@dataclass(frozen=True)
class Offered:
    """A tool as the client knows it: its ``name``, ``namespace`` and whether it is ``custom``."""

    name: str
    namespace: str | None = None
    custom: bool = False


@dataclass
class ToolSet:
    """The request's tools: the function tools offered to the model, what each offered name is to the
    client, and the hosted tools left out."""

    functions: list[Tool] = field(default_factory=list)
    by_offered_name: dict[str, Offered] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)

    def offered_name(self, name: str, namespace: str | None) -> str:
        return f"{namespace}{NAMESPACE_SEPARATOR}{name}" if namespace else name


def _custom_description(tool: dict[str, Any]) -> str:
    text = str(tool.get("description") or "")
    fmt = tool.get("format")
    if isinstance(fmt, dict) and fmt.get("type") == "grammar" and isinstance(fmt.get("definition"), str):
        syntax = fmt.get("syntax") or "grammar"
        text += (f"\n\nThe `{CUSTOM_INPUT}` argument is free-form text that must follow this {syntax} grammar:\n"
                 f"{fmt['definition']}")
    return text.strip()


def _add(tools: ToolSet, tool: dict[str, Any], where: str, namespace: str | None, hosted: str,  # noqa: C901 — one branch per tool type (hosted, namespace, function, custom), each a 400 in words
         context: str = "") -> None:
    kind = tool.get("type")
    if not isinstance(kind, str):
        raise bad_request(f"{where}.type: expected a string (function, custom, namespace or a hosted tool), got "
                          f"{shown(kind)}", where.replace("[", ".").replace("]", "") + ".type")
    known = hosted_name(kind)
    if known is not None:
        if hosted == "reject":
            raise bad_request(f"{where}: the hosted tool {known!r} is not available on this server (it runs models "
                              "on your own backend); remove it from tools", where)
        tools.skipped.append(known)
        return
    if kind == "namespace":
        if namespace is not None:
            raise bad_request(f"{where}: namespaces do not nest", where)
        ns = tool.get("name")
        if not isinstance(ns, str) or not ns:
            raise bad_request(f"{where}.name: a namespace needs a name", f"{where}.name")
        if (problem := tool_name_problem(ns)) is not None:
            raise bad_request(f"{where}.name: {problem}", f"{where}.name")
        inner = tool.get("tools")
        if not isinstance(inner, list):
            raise bad_request(f"{where}.tools: a namespace needs a list of tools", f"{where}.tools")
        for j, sub in enumerate(inner):
            if not isinstance(sub, dict):
                raise bad_request(f"{where}.tools[{j}]: a tool must be an object", f"{where}.tools.{j}")
            _add(tools, sub, f"{where}.tools[{j}]", ns, hosted, str(tool.get("description") or ""))
        return
    if kind not in ("function", "custom"):
        raise bad_request(f"{where}.type: unknown tool type {shown(kind)} (supported: function, custom, namespace; "
                          "hosted tools are left out)", f"{where}.type")
    name = tool.get("name")
    if not isinstance(name, str) or not name:
        raise bad_request(f"{where}.name: Field required", f"{where}.name")
    offered = tools.offered_name(name, namespace)
    if (problem := tool_name_problem(name)) is not None:
        raise bad_request(f"{where}.name: {problem}", f"{where}.name")
    if tool_name_problem(offered) is not None:  # the namespaced name the model sees is too long
        raise bad_request(f"{where}.name: {offered!r}, this tool's name with its namespace, is not a valid tool "
                          f"name: {TOOL_NAME_RULE}", f"{where}.name")
    prefix = f"({namespace}: {context}) " if namespace and context else ""  # what the namespace is for
    if kind == "function":
        function: dict[str, Any] = {"name": offered}
        description = tool.get("description")
        if isinstance(description, str) or prefix:
            function["description"] = prefix + (description if isinstance(description, str) else "")
        parameters = tool.get("parameters")
        function["parameters"] = parameters if isinstance(parameters, dict) else {"type": "object", "properties": {}}
        if tool.get("strict") is True:
            function["strict"] = True
    else:
        function = {"name": offered, "description": prefix + _custom_description(tool), "parameters": {
            "type": "object", "properties": {CUSTOM_INPUT: {"type": "string", "description": "the tool's input"}},
            "required": [CUSTOM_INPUT]}}
    if offered in tools.by_offered_name:
        raise bad_request(f"{where}.name: two tools are named {shown(offered)}", f"{where}.name")
    tools.by_offered_name[offered] = Offered(name, namespace, kind == "custom")
    tools.functions.append(Tool.function(offered, function["parameters"], function.get("description"),
                                         bool(function.get("strict")), shown={"type": "function", "function": function}))


def offered_tools(raw: list[dict[str, Any]] | None, hosted: str) -> ToolSet:
    """The request's ``tools`` as the function tools the model is offered (see the module docstring)."""
    tools = ToolSet()
    for i, tool in enumerate(raw or ()):
        if not isinstance(tool, dict):
            raise bad_request(f"tools[{i}]: a tool must be an object", f"tools.{i}")
        _add(tools, tool, f"tools[{i}]", None, hosted)
    return tools


ChoiceMode = Literal["none", "auto", "required"]


def tool_choice(raw: str | dict[str, Any] | None, tools: ToolSet) -> tuple[ChoiceMode | None, str | None, ToolSet]:
    """``(mode, named offered tool, the tools offered)`` for the request's ``tool_choice``: ``tools``
    itself, or a new set narrowed to the ``allowed_tools`` (``tools`` is never changed: the prefix
    service hands it to later requests)."""
    if raw is None:
        return None, None, tools
    if isinstance(raw, str):
        if raw not in ("none", "auto", "required"):
            raise bad_request(f"tool_choice: {shown(raw)} is not one of none, auto, required", "tool_choice")
        return raw, None, tools  # type: ignore[return-value]
    kind = raw.get("type")
    if kind in ("function", "custom"):
        name = raw.get("name")
        namespace = raw.get("namespace")
        offered = tools.offered_name(str(name), namespace if isinstance(namespace, str) else None)
        if offered not in tools.by_offered_name:
            raise bad_request(f"tool_choice names {shown(name)}, which is not in tools", "tool_choice")
        return None, offered, tools
    if kind == "allowed_tools":
        mode = raw.get("mode", "auto")
        if mode not in ("auto", "required"):
            raise bad_request("tool_choice.mode: expected auto or required", "tool_choice.mode")
        listed = raw.get("tools")
        if listed is None:
            listed = []
        if not isinstance(listed, list):
            raise bad_request("tool_choice.tools: expected a list of tools", "tool_choice.tools")
        allowed = set()
        for t in listed:
            if isinstance(t, dict) and isinstance(t.get("name"), str):
                ns = t.get("namespace")
                allowed.add(tools.offered_name(t["name"], ns if isinstance(ns, str) else None))
        return mode, None, replace(tools, functions=[f for f in tools.functions if f.spec.name in allowed])
    raise bad_request(f"tool_choice: type {shown(kind)} is not supported here (supported: none, auto, required, "
                      "function, custom, allowed_tools)", "tool_choice")


def response_format(text: TextConfig | None) -> dict[str, Any] | None:
    """``text.format`` as Chat Completions' ``response_format`` (the same constraints follow)."""
    fmt = text.format if text is not None else None
    if not fmt:
        return None
    kind = fmt.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "json_object"}
    if kind == "json_schema":
        schema = fmt.get("schema")
        if not isinstance(schema, dict):
            raise bad_request("text.format.schema: a JSON schema object is required", "text.format.schema")
        if nesting(schema) > MAX_SCHEMA_NESTING:  # before anything encodes it (the schema itself: ``check_ask``)
            raise bad_request(f"text.format.schema is nested too deeply (more than {MAX_SCHEMA_NESTING} levels)",
                              "text.format.schema")
        return {"type": "json_schema", "json_schema": {"name": fmt.get("name") or "response", "schema": schema,
                                                        "strict": bool(fmt.get("strict"))}}
    raise bad_request(f"text.format.type: {shown(kind)} is not one of text, json_object, json_schema",
                      "text.format.type")


@dataclass(frozen=True, slots=True)
class Parsed:
    """A request read whole: its typed fields (``request``), the ``tools`` offered to the model,
    ``tool_choice`` as a mode and a named (offered) tool, ``text.format`` as Chat Completions'
    ``response_format``, the ``conversation`` id, and the ``input`` as items (each with an id)."""

    request: ResponsesRequest
    tools: ToolSet
    mode: ChoiceMode | None
    named_tool: str | None
    response_format: dict[str, Any] | None
    conversation: str | None
    input: list[dict[str, Any]]
    #: the input's JSON where the body read knew it (``app.bodies``)
    elements: Elements | None = None
