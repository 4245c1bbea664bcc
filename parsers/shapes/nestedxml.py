"""Tool calls whose arguments are nested XML elements, each tag behind a prefix token (MiniMax-M3).

    ]<]minimax[>[<invoke name="NAME">]<]minimax[>[<city>Paris]<]minimax[>[</city>
    ]<]minimax[>[<point>]<]minimax[>[<x>1.5]<]minimax[>[</x>]<]minimax[>[</point>
    ]<]minimax[>[<tags>]<]minimax[>[<item>a]<]minimax[>[</item>]<]minimax[>[<item>b]<]minimax[>[</item>]<]minimax[>[</tags>
    ]<]minimax[>[</invoke>

Only a tag behind the prefix is markup (``a <b> c`` in a value is text); spacing between the prefix
and its tag is allowed. A parameter is a leaf — its text — or a container of child elements:
an object (a child per key; a key written twice is a list), or an array (``<item>`` children).
Which one comes from the tool's JSON schema (``parsers.core.args.arg_type``: ``object`` /
``array`` → a container); a parameter the schema does not type is a container when an element
follows its opening tag, else text. Leaves are typed by their own schema (``items``,
``prefixItems``, ``properties``, ``additionalProperties``, local ``$ref``s followed); a union of a
string and a container type is a container (its elements spell the object or array; text alone is
typed by the union rule), and elements inside a parameter that is only a string are text of it.

The arguments object streams parameter by parameter: ``"KEY": `` as soon as a parameter opens,
a string leaf's text JSON-escaped as it arrives, any other value once its closing tag arrives
(a container is built as its elements arrive — each examined once — and written whole when it
closes). A closing tag that does not match, or nesting deeper than ``MAX_DEPTH``, makes the call
malformed (its text passes through as content).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field
from functools import cache, partial
from typing import Any

from parsers.core.args import ArgsObject, arg_type, param_kind, resolve_ref
from parsers.core.cursor import Cursor
from parsers.core.driver import Out
from parsers.core.markers import MarkerSet
from parsers.format import CallContext, ToolFormat
from parsers.shapes.sections import calls_format
from parsers.tools import ToolSpec
from parsers.wire import ArgsEncoding, WireFormat, lit

MAX_DEPTH = 64
MAX_SPACING = 64  # spacing looked through to see whether an element follows an opening tag
_TAG_END = MarkerSet((">",))
_SPACE = " \t\r\n"
_TAG_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")
_TYPING_KEYS = ("type", "anyOf", "oneOf", "allOf", "enum", "properties", "items", "prefixItems", "$ref")


@cache
def _markers(*literals: str) -> MarkerSet:
    return MarkerSet(literals)


@dataclass(frozen=True)
class NestedXmlShape:
    """How one format of nested elements is spelled."""

    prefix: str  # the token before every tag: "]<]minimax[>["
    section: tuple[str, str] = ("<tool_call>", "</tool_call>")  # tags around a run of calls
    invoke: str = '<invoke name="'  # opens a call (the name follows, up to ``name_end``)
    name_end: str = '">'
    invoke_end: str = "invoke"  # the closing tag's name: "</invoke>"
    item: str = "item"  # the tag of an array element


def _tag(cur: Cursor) -> Generator[None, None, str | None]:
    """After a prefix token: optional spacing, ``<``, the tag's text up to ``>`` (all consumed)."""
    yield from cur.skip_ws()
    if not (yield from cur.expect("<")):
        return None
    text, end = yield from cur.read_until(_TAG_END, limit=256)
    return text.strip() if end is not None else None


def _element_follows(cur: Cursor, shape: NestedXmlShape) -> Generator[None, None, bool]:
    """Whether an opening tag (not a closing one) comes next, spacing allowed — looked at, not
    consumed (through at most ``MAX_SPACING`` characters of spacing; beyond them it is text)."""
    prefix = shape.prefix
    n = len(prefix) + 2
    while True:
        text = yield from cur.peek(n)
        at_end = len(text) < n
        body = text.lstrip(_SPACE)
        if len(body) < len(prefix):
            if at_end or not prefix.startswith(body) or n > MAX_SPACING + len(prefix):
                return False
        elif not body.startswith(prefix):
            return False
        else:
            rest = body[len(prefix):].lstrip(_SPACE)
            if len(rest) >= 2:
                return rest[0] == "<" and rest[1] != "/"
            if at_end or n > 2 * MAX_SPACING + len(prefix):
                return False
        n += 8


def child_schema(parent: Mapping[str, Any] | None, tag: str, count: int, item: str,
                 root: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """The schema of the ``count``-th child (0-based) named ``tag`` of a container of ``parent``."""
    if parent is None:
        return None
    if param_kind(parent, root)[0] == "array" and tag == item:
        prefix_items = parent.get("prefixItems")
        if isinstance(prefix_items, list) and count < len(prefix_items):
            return resolve_ref(prefix_items[count], root)
        items = parent.get("items")
        return resolve_ref(items, root) if isinstance(items, Mapping) else None
    props = parent.get("properties")
    if isinstance(props, Mapping) and tag in props:
        return resolve_ref(props[tag], root)
    extra = parent.get("additionalProperties")
    return resolve_ref(extra, root) if isinstance(extra, Mapping) else None


@dataclass
class _Element:
    tag: str
    schema: Mapping[str, Any] | None
    text: list[str] = field(default_factory=list)
    children: list[tuple[str, Any]] = field(default_factory=list)

    def value(self, root: Mapping[str, Any] | None, item: str) -> Any:
        typed = arg_type(self.schema, root)
        kind = typed.kind
        if not self.children:
            return typed.convert("".join(self.text).strip(_SPACE))
        if kind == "array" or (kind != "object" and all(tag == item for tag, _ in self.children)):
            return [value for _, value in self.children]
        counts: dict[str, int] = {}
        for tag, _ in self.children:
            counts[tag] = counts.get(tag, 0) + 1
        obj: dict[str, Any] = {}
        for tag, value in self.children:  # a key written more than once is a list of its values
            if counts[tag] == 1:
                obj[tag] = value
            else:
                obj.setdefault(tag, []).append(value)
        return obj


def _container(cur: Cursor, shape: NestedXmlShape, key: str, schema: Mapping[str, Any] | None,
               root: Mapping[str, Any] | None) -> Generator[None, None, tuple[bool, Any]]:
    """A container parameter up to its closing tag: its JSON value, built as elements arrive."""
    stack = [_Element(key, schema)]
    counts: list[dict[str, int]] = [{}]
    prefix = _markers(shape.prefix)
    while True:
        top = stack[-1]
        marker = yield from cur.until(prefix, top.text.append)
        if marker is None:
            return False, None
        tag = yield from _tag(cur)
        if tag is None:
            return False, None
        if tag.startswith("/"):
            if tag[1:].strip() != top.tag:
                return False, None
            stack.pop()
            counts.pop()
            value = top.value(root, shape.item)
            if not stack:
                return True, value
            stack[-1].children.append((top.tag, value))
            continue
        if len(stack) >= MAX_DEPTH or not tag:
            return False, None
        seen = counts[-1].get(tag, 0)
        counts[-1][tag] = seen + 1
        stack.append(_Element(tag, child_schema(top.schema, tag, seen, shape.item, root)))
        counts.append({})


def _leaf(cur: Cursor, shape: NestedXmlShape, key: str, write: Callable[[str], None]) -> Generator[None, None, bool]:
    """A leaf parameter's text up to its closing tag (consumed). Elements inside it are text of the
    value, written as they stand (a string parameter the model wrote structure into); an element
    named like the parameter nests, so only the closing tag that matches the leaf's opening ends it."""
    prefix = _markers(shape.prefix)
    depth = 0
    while True:
        if (yield from cur.until(prefix, write)) is None:
            return False
        spacing: list[str] = []
        yield from cur.skip_ws(spacing.append)
        if not (yield from cur.expect("<")):
            return False
        text, end = yield from cur.read_until(_TAG_END, limit=256)
        if end is None:
            return False
        tag = text.strip()
        if tag.startswith("/") and tag[1:].strip() == key:
            if not depth:
                return True
            depth -= 1
        elif tag == key:
            depth += 1
        write(shape.prefix + "".join(spacing) + "<" + text + ">")


def nested_xml_call(shape: NestedXmlShape, tools: Mapping[str, ToolSpec], cur: Cursor,
                    out: Out) -> Generator[None, None, bool]:
    """One call after its opening ``PREFIX<invoke name="``, up to its ``PREFIX</invoke>``."""
    name, end = yield from cur.read_until(_markers(shape.name_end), limit=256)
    name = name.strip()
    if end is None or not name:
        return False
    out.calls.header(name)
    args = ArgsObject(out.calls)
    tool = tools.get(name)
    root = tool.parameters if tool is not None else None
    while True:
        yield from cur.skip_ws()
        if not (yield from cur.expect(shape.prefix)):
            return False
        tag = yield from _tag(cur)
        if tag is None or not tag:
            return False
        if tag.startswith("/"):
            if tag[1:].strip() != shape.invoke_end:
                return False
            args.close()
            return True
        schema = tool.param_schema(tag) if tool is not None else None
        typed = arg_type(schema, root)
        declared = schema is not None and any(k in schema for k in _TYPING_KEYS)
        args.key(tag)
        if ({"object", "array"} & set(typed.kinds)
                or (not declared and (yield from _element_follows(cur, shape)))):
            ok, value = yield from _container(cur, shape, tag, schema, root)
            if not ok:
                return False
            args.raw(json.dumps(value, ensure_ascii=False))
            continue
        if not (yield from args.value(typed, False, typed.nullable, partial(_leaf, cur, shape, tag))):
            return False


# ------------------------------------------------------------------------------ declaring formats


def _element(tag: str, value: Any, shape: NestedXmlShape) -> str:
    return shape.prefix + f"<{tag}>" + _value(value, shape) + shape.prefix + f"</{tag}>"


def _value(value: Any, shape: NestedXmlShape) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        return "".join(_element(str(k), v, shape) for k, v in value.items())
    if isinstance(value, list | tuple):
        return "".join(_element(shape.item, v, shape) for v in value)
    return json.dumps(value, ensure_ascii=False, allow_nan=False)


@dataclass(frozen=True)
class NestedXml(ArgsEncoding):
    """Arguments as nested elements behind a prefix token (see the module docstring): strings raw,
    numbers, booleans and null as JSON, objects as one element per key, arrays as ``item``s."""

    shape: NestedXmlShape

    def writable(self, value: object, top: bool = True) -> bool:
        """Whether a value reads back as written when the tool's schema types only the top-level
        parameters: inside a container every leaf is a string that starts and ends with no spacing
        and is not JSON text (an untyped leaf is read as JSON when it is JSON), keys are tag names
        other than the item tag, and no container is empty (it would read as an empty string); no
        string holds the prefix token."""
        if isinstance(value, str):
            return self.shape.prefix not in value and (top or (value == value.strip(_SPACE) and not _is_json(value)))
        if isinstance(value, Mapping):
            return (top or bool(value)) and all(
                _TAG_NAME.fullmatch(str(k)) is not None and k != self.shape.item and self.writable(v, False)
                for k, v in value.items())
        if isinstance(value, list | tuple):
            return (top or bool(value)) and all(self.writable(v, False) for v in value)
        return top

    def render(self, arguments: Mapping[str, Any]) -> str:
        return "".join(_element(str(k), v, self.shape) for k, v in arguments.items())


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except (ValueError, RecursionError):
        return False
    return True


def nested_xml(shape: NestedXmlShape) -> ToolFormat:
    """A format of calls with nested-element arguments inside a section (calls outside one are
    read too)."""
    p = shape.prefix
    section = (p + shape.section[0], p + shape.section[1])
    invoke = p + shape.invoke

    def read_call(ctx: CallContext, cur: Cursor, out: Out, marker: str) -> Generator[None, None, bool]:
        return (yield from nested_xml_call(shape, ctx.tools_by_name, cur, out))

    wire = WireFormat(lit(invoke) + "$name" + lit(shape.name_end) + "$args" + lit(p + f"</{shape.invoke_end}>"),
                      section=(section[0] + "\n", "\n" + section[1]), separator="\n", args=NestedXml(shape))
    return calls_format(invoke, read_call, wire=wire, section=section, bare_calls=True, markers=(p,))


__all__ = ["MAX_DEPTH", "NestedXml", "NestedXmlShape", "child_schema", "nested_xml", "nested_xml_call"]
