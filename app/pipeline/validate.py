"""Checks every face applies to an ``Ask`` before planning: request limits and tool schemas.

Problems are ``APIError`` 400s that name the field (``param`` in Chat Completions' spelling; faces
with other spellings pass their own ``tools_param``)."""

from __future__ import annotations

import hashlib
import re
import threading
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

import orjson
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from app.errors import bad_request
from app.pipeline.ask import Ask, Tool
from app.settings import Settings

#: the tool names every face accepts: MCP's rule (ASCII letters, digits, ``_``, ``-``, ``.``; SEP-986 also
#: ``/``), 1 to 128 characters. OpenAI's ``[a-zA-Z0-9_-]{1,64}`` refuses the dotted and slashed names MCP
#: servers use (``admin.tools.list``, ``user-profile/update``). The rule still keeps out everything that
#: could break the markup a name is written into — quotes, backslashes, whitespace, ``<``, ``>``, ``{``,
#: ``:``, ``,``, ``$``, non-ASCII — since formats write names raw into JSON strings, tags, call headers
#: and templates; grammars and structural tags escape them as well.
TOOL_NAME = re.compile(r"[A-Za-z0-9_./-]{1,128}")
TOOL_NAME_RULE = "use 1 to 128 ASCII letters, digits, underscores, dashes, dots or slashes"


def tool_name_problem(name: object) -> str | None:
    """Why ``name`` cannot be a tool name (for a message that names the field), or ``None``."""
    if isinstance(name, str) and TOOL_NAME.fullmatch(name):
        return None
    return f"{name!r} is not a valid tool name: {TOOL_NAME_RULE}"


#: schema checks as they travel between processes: (key, verdict) pairs
Verdicts = tuple[tuple[bytes, str | None], ...]


class SchemaVerdicts:
    """Schema checks already made, by the digest of the schema's canonical text: agents send the
    same tools with every request, and checking a schema costs far more than hashing it. Keyed by
    a 16-byte digest, never the schema itself, so the memory it holds is bounded by its entry count
    (``capacity`` × ~200 bytes) however large the schemas were. Thread-safe (checks run off the loop)."""

    def __init__(self, capacity: int = 8192) -> None:
        self.capacity = capacity
        self._verdicts: OrderedDict[bytes, str | None] = OrderedDict()
        self._lock = threading.Lock()

    def problem(self, encoded: bytes) -> str | None:
        """Why a tool's JSON schema (canonical JSON text) is invalid, or ``None``."""
        return self.problem_of(self.key(encoded), encoded)

    @staticmethod
    def key(encoded: bytes) -> bytes:
        return hashlib.blake2b(encoded, digest_size=16).digest()

    def known(self, key: bytes) -> bool:
        """Whether the schema with this key was checked before (it passed the checks made before
        this one: its nesting and its size)."""
        with self._lock:
            return key in self._verdicts

    def verdicts(self, keys: Iterable[bytes]) -> Verdicts:
        """The verdicts known for ``keys`` (a key not known is left out)."""
        with self._lock:
            return tuple((key, self._verdicts[key]) for key in keys if key in self._verdicts)

    def learn(self, verdicts: Verdicts) -> None:
        """Take checks made in another process: the server's, for a prepare worker; a worker's, for the
        server (one process checks a schema once, whichever of them checked it first)."""
        with self._lock:
            for key, verdict in verdicts:
                self._verdicts[key] = verdict
            while len(self._verdicts) > self.capacity:
                self._verdicts.popitem(last=False)

    def problem_of(self, key: bytes, encoded: bytes) -> str | None:
        """``problem(encoded)``, its key already computed."""
        with self._lock:
            if key in self._verdicts:
                self._verdicts.move_to_end(key)
                return self._verdicts[key]
        try:
            Draft202012Validator.check_schema(orjson.loads(encoded))
            verdict = None
        except SchemaError as exc:
            verdict = exc.message
        except RecursionError:
            verdict = "it is nested too deeply"
        with self._lock:
            self._verdicts[key] = verdict
            while len(self._verdicts) > self.capacity:
                self._verdicts.popitem(last=False)
        return verdict


VERDICTS = SchemaVerdicts()


#: objects and arrays inside one another in a tool schema, at most (real schemas use a dozen or two);
#: checked before the recursive schema check, so the answer never depends on the stack in use. The
#: recursive check needs ~8 frames a level: 64 levels stay far from the default recursion limit
#: from any caller's stack (at 128, a 120-level schema passed or failed by the stack and the limit)
MAX_SCHEMA_NESTING = 64


def nesting(value: Any) -> int:
    """How deeply objects and arrays nest in ``value`` (iterative: any depth is safe)."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return deepest


def schema_problem(encoded: bytes) -> str | None:
    return VERDICTS.problem(encoded)


#: a schema as its check is keyed: its canonical text and the text's digest (``None``: it does not encode)
SchemaText = tuple[bytes, bytes] | None


def schema_text(schema: Any) -> SchemaText:
    """``schema`` as its check is keyed (``SchemaText``)."""
    try:
        encoded = orjson.dumps(schema, option=orjson.OPT_SORT_KEYS)
    except orjson.JSONEncodeError:
        return None
    return encoded, SchemaVerdicts.key(encoded)


def _tool_schema_text(tool: Tool) -> SchemaText:
    return schema_text(tool.spec.parameters)


def _format_given(ask: Ask) -> Any:
    """What a ``json_schema`` response format gives as its schema (anything; ``None``: none)."""
    fmt = ask.response_format or {}
    spec = fmt.get("json_schema") if fmt.get("type") == "json_schema" else None
    return spec.get("schema") if isinstance(spec, dict) else None


def _format_schema(ask: Ask) -> dict[str, Any] | None:
    """The response format's JSON schema, when it is one to check."""
    schema = _format_given(ask)
    return schema if isinstance(schema, dict) else None


def schema_texts(ask: Ask) -> list[SchemaText]:
    """``ask``'s schemas as their checks are keyed — each tool's, then the response format's (when
    it has one) — worked out once per request (``Ask.schema_texts`` keeps them, and a prepare
    worker gets them with the request)."""
    if ask.schema_texts is None:
        fmt = _format_schema(ask)
        ask.schema_texts = [*(tool.once("schema_text", _tool_schema_text) for tool in ask.tools),
                            *([schema_text(fmt)] if fmt is not None else [])]
    return ask.schema_texts


def unchecked_bytes(ask: Ask) -> int:
    """How much of ``ask``'s schemas this process has not checked before (their canonical text's
    size): checking costs ~5 µs a byte (the request decides where it is prepared by it)."""
    return sum(len(text[0]) for text in schema_texts(ask) if text is not None and not VERDICTS.known(text[1]))


def known_verdicts(ask: Ask) -> Verdicts:
    """What this process knows of the checks of ``ask``'s schemas, to hand to the process that
    prepares it or back from it."""
    return VERDICTS.verdicts(text[1] for text in schema_texts(ask) if text is not None)


#: objects and arrays inside one another in a handed-back call's arguments, at most: rendering
#: decodes and re-encodes them recursively, so the bound keeps that far from the recursion limit
MAX_ARGUMENT_NESTING = 128


def arguments_nesting(arguments: Any) -> int:
    """How deeply a call's arguments nest (JSON text is decoded first; text that is not JSON is a
    plain string, depth 0). Text with no more brackets than the bound is not decoded at all."""
    if not isinstance(arguments, str):
        return nesting(arguments)
    if arguments.count("[") + arguments.count("{") <= MAX_ARGUMENT_NESTING:
        return 0
    try:
        return nesting(orjson.loads(arguments))
    except orjson.JSONDecodeError as exc:
        return MAX_ARGUMENT_NESTING + 1 if "depth" in str(exc) else 0


def check_schema(schema: Any, where: str, param: str, settings: Settings, text: SchemaText) -> None:
    """A JSON schema the client sent (a tool's parameters, a response format): nesting, size,
    validity — a 400 naming ``where`` / ``param`` for the first problem. ``text``: the schema's
    ``SchemaText`` (``schema_texts``)."""
    key = text[1] if text is not None else None
    # a schema checked before passed the nesting check then: agents send the same tools every turn
    if (key is None or not VERDICTS.known(key)) and nesting(schema) > MAX_SCHEMA_NESTING:
        raise bad_request(f"{where} is nested too deeply (more than {MAX_SCHEMA_NESTING} levels)", param)
    if text is None:
        raise bad_request(f"{where} is nested too deeply", param)
    encoded, key = text
    if len(encoded) > settings.max_tool_schema_bytes:
        raise bad_request(f"{where} is larger than {settings.max_tool_schema_bytes} bytes (--max-tool-schema-bytes)",
                          param)
    problem = VERDICTS.problem_of(key, encoded)
    if problem is not None:
        raise bad_request(f"{where} is not a valid JSON schema: {problem}", param)


def check_ask(ask: Ask, settings: Settings, tools_param: str = "tools", schema_key: str = "function.parameters") -> None:
    """Limits (messages, tools, schema size), the tool and response-format schemas, unique tool
    names, how deeply handed-back call arguments nest, and tool-choice consistency (``max_tokens``
    is ``app.pipeline.budget``'s, once the prompt is known)."""
    if len(ask.turns) > settings.max_messages:
        raise bad_request(f"too many messages ({len(ask.turns)} > {settings.max_messages})", "messages")
    if len(ask.tools) > settings.max_tools:
        raise bad_request(f"too many tools ({len(ask.tools)} > {settings.max_tools})", tools_param)
    # the name sits next to the schema: ``function.name`` (Chat Completions), ``name`` (Messages)
    name_key = schema_key.rpartition(".")[0] + ".name" if "." in schema_key else "name"
    names: set[str] = set()
    texts = schema_texts(ask)
    for i, tool in enumerate(ask.tools):
        name_problem = tool_name_problem(tool.spec.name)
        if name_problem is not None:
            raise bad_request(f"{tools_param}[{i}].{name_key}: {name_problem}", f"{tools_param}.{i}.{name_key}")
        if tool.spec.name in names:
            raise bad_request(f"{tools_param}[{i}].{name_key}: two tools are named {tool.spec.name!r}",
                              f"{tools_param}.{i}.{name_key}")
        names.add(tool.spec.name)
        check_schema(tool.spec.parameters, f"{tools_param}[{i}].{schema_key}", f"{tools_param}.{i}.{schema_key}",
                     settings, texts[i])
    schema = _format_given(ask)
    if schema is not None:
        if not isinstance(schema, dict):
            raise bad_request(f"{ask.format_param}: a JSON schema object is required", ask.format_param)
        check_schema(schema, ask.format_param, ask.format_param, settings, texts[len(ask.tools)])
    for i in ask.fresh_turns():  # reused ones passed before
        for call in ask.turns[i].calls:
            if arguments_nesting(call.arguments) > MAX_ARGUMENT_NESTING:
                raise bad_request(f"the arguments of the tool call {call.id[:64]!r} handed back in turn {i} are nested "
                                  f"too deeply (more than {MAX_ARGUMENT_NESTING} levels)", code="arguments_too_deep")
    if ask.n > settings.max_choices:
        raise bad_request(f"n is {ask.n}; this server generates at most {settings.max_choices} choices per request "
                          "(--max-choices)", "n")
    if ask.tool_choice == "required" and not ask.tools:
        raise bad_request('tool_choice "required" needs tools', "tool_choice")
    if ask.named_tool is not None and ask.named_tool not in {t.spec.name for t in ask.tools}:
        raise bad_request(f"tool_choice names {ask.named_tool!r}, which is not in tools", "tool_choice")
