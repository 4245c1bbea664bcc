"""One typing rule for argument values written as text, in every format that writes them so.

The same table of (schema, text the model wrote, value) runs through each format's own markup,
in one chunk and per character: ``parsers.core.args.arg_type`` decides in all of them. Formats
that declare a value's type themselves (DSML / GCML ``string="…"``, Kimi K3 ``type="…"``, K2
Horizon's type tag) write the declaration their templates render for the value meant, and a
second table checks how a declaration and the schema combine. (Their SGLang names: the XML-style,
GLM-style, DSML / GCML, XTML, nested-element and MiniCPM5 formats.)
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from parsers import build_response_parser, fold
from parsers.core.args import JSON, ArgType, arg_type, json_type, schema_kinds

POINT = {"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "number"}}}
DEFS = {"Point": POINT, "Mode": {"enum": ["fast", "slow"]}, "Count": {"type": "integer"}}

#: (label, schema of parameter "v" — None: the tool does not describe it —, text written, value)
CASES: list[tuple[str, Any, str, Any]] = [
    ("string", {"type": "string"}, "Paris", "Paris"),
    ("string that looks like an object", {"type": "string"}, '{"a": 1}', '{"a": 1}'),
    ("string that looks like an array", {"type": "string"}, "[1, 2]", "[1, 2]"),
    ("string that looks like a number", {"type": "string"}, "42", "42"),
    ("string that looks like a boolean", {"type": "string"}, "true", "true"),
    ("string that says null", {"type": "string"}, "null", "null"),
    ("integer", {"type": "integer"}, "42", 42),
    ("negative integer", {"type": "integer"}, "-7", -7),
    ("zero-padded integer", {"type": "integer"}, "07", 7),
    ("integer written as 3.0", {"type": "integer"}, "3.0", 3),
    ("not an integer: kept", {"type": "integer"}, "4.5", "4.5"),
    ("not a number: kept", {"type": "integer"}, "about 3", "about 3"),
    ("null for an integer", {"type": "integer"}, "null", None),
    ("number", {"type": "number"}, "1.5", 1.5),
    ("integral number", {"type": "number"}, "3", 3),
    ("exponent", {"type": "number"}, "1e3", 1000.0),
    ("NaN is not JSON: kept", {"type": "number"}, "NaN", "NaN"),
    ("boolean", {"type": "boolean"}, "true", True),
    ("Python boolean", {"type": "boolean"}, "False", False),
    ("not a boolean: kept", {"type": "boolean"}, "yes", "yes"),
    ("null type", {"type": "null"}, "null", None),
    ("object", {"type": "object"}, '{"a": [1, {"b": null}]}', {"a": [1, {"b": None}]}),
    ("object as a Python literal", {"type": "object"}, "{'a': True, 'b': None}", {"a": True, "b": None}),
    ("object from properties alone", {"properties": {"a": {}}}, '{"a": 1}', {"a": 1}),
    ("not an object: kept", {"type": "object"}, "[1]", "[1]"),
    ("broken object: kept", {"type": "object"}, '{"a": 1', '{"a": 1'),
    ("empty object", {"type": "object"}, "", {}),
    ("array", {"type": "array", "items": {"type": "integer"}}, '[1, "a"]', [1, "a"]),
    ("not an array: kept", {"type": "array"}, '{"a": 1}', '{"a": 1}'),
    ("nullable integer: null", {"anyOf": [{"type": "integer"}, {"type": "null"}]}, "null", None),
    ("nullable integer: number", {"type": ["integer", "null"]}, "5", 5),
    ("nullable string: null", {"type": ["string", "null"]}, "null", None),
    ("integer or boolean: boolean", {"type": ["integer", "boolean"]}, "true", True),
    ("integer or boolean: integer", {"oneOf": [{"type": "integer"}, {"type": "boolean"}]}, "3", 3),
    ("object or array: array", {"anyOf": [{"type": "object"}, {"type": "array"}]}, "[1]", [1]),
    # a union with a string (issue 39, item 2): a JSON value of another member takes that type, else the text
    ("string or integer: an integer", {"anyOf": [{"type": "string"}, {"type": "integer"}]}, "42", 42),
    ("string or object: an object", {"type": ["string", "object"]}, '{"a": 1}', {"a": 1}),
    ("string or integer: 7", {"type": ["string", "integer"]}, "7", 7),
    ("string or integer: text", {"type": ["string", "integer"]}, "2 dollars", "2 dollars"),
    ("string or integer: not JSON, kept", {"oneOf": [{"type": "integer"}, {"type": "string"}]}, "018956", "018956"),
    ("string or integer: a JSON string literal as written", {"type": ["string", "integer"]}, '"7"', '"7"'),
    ("string or integer: a boolean is text", {"type": ["string", "integer"]}, "true", "true"),
    ("string or object: broken JSON is text", {"type": ["string", "object"]}, "{not valid json", "{not valid json"),
    ("string or boolean: a Python literal is text", {"type": ["string", "boolean"]}, "True", "True"),
    ("string or number: a number", {"anyOf": [{"type": "number"}, {"type": "string"}]}, "1.5", 1.5),
    ("string or array: an array", {"anyOf": [{"type": "string"}, {"$ref": "#/$defs/Point"}, {"type": "array"}]},
     '["a", 1]', ["a", 1]),
    ("string or integer, not nullable: null is text", {"type": ["string", "integer"]}, "null", "null"),
    ("string or integer or null: null", {"type": ["string", "integer", "null"]}, "null", None),
    ("$ref to an object", {"$ref": "#/$defs/Point"}, '{"x": 1, "y": 2.5}', {"x": 1, "y": 2.5}),
    ("$ref to an integer", {"$ref": "#/$defs/Count"}, "3", 3),
    ("$ref to string enum", {"$ref": "#/$defs/Mode"}, "fast", "fast"),
    ("nullable $ref", {"anyOf": [{"$ref": "#/$defs/Point"}, {"type": "null"}]}, "null", None),
    ("allOf around a $ref", {"allOf": [{"$ref": "#/$defs/Point"}], "description": "p"}, '{"x": 0}', {"x": 0}),
    ("integer enum", {"enum": [1, 2, 3]}, "2", 2),
    ("const", {"const": True}, "true", True),
    ("type name other tools write", {"type": "int"}, "5", 5),
    # untyped (no schema, or one without a type): JSON if the text is JSON, else the text (issue 27, item 4)
    ("schema without a type: a JSON number", {"description": "anything"}, "42", 42),
    ("schema without a type: text", {"description": "anything"}, "about 42", "about 42"),
    ("parameter the tool does not describe: a JSON object", None, '{"a": 1}', {"a": 1}),
    ("untyped: a JSON array", None, '[1, "two", null]', [1, "two", None]),
    ("untyped: a JSON boolean", None, "true", True),
    ("untyped: a JSON null", None, "null", None),
    ("untyped: a JSON string literal is its string", None, '"quoted"', "quoted"),
    ("untyped: text that is not JSON", None, "Paris, France", "Paris, France"),
    ("untyped: a Python literal is text", None, "True", "True"),
    ("untyped: broken JSON is text", None, '{"a": 1', '{"a": 1'),
]


def _tools(schema: Any) -> list[dict[str, Any]]:
    props = {"w": {"type": "string"}} if schema is None else {"v": schema}
    return [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": props, "$defs": DEFS}}}]


def _flag(value: Any) -> str:
    """DSML's ``string="…"`` as the templates render it for the value meant."""
    return "true" if isinstance(value, str) else "false"


D, G, P = "｜DSML｜", "｜GCML｜", "]<]minimax[>["
#: format name → (tool parser, markup of one call to ``f`` with parameter ``v`` = text, given the value meant)
FORMATS: dict[str, tuple[str, Callable[[str, Any], str]]] = {
    "qwen3_coder": ("qwen3_coder", lambda t, v: f"<tool_call>\n<function=f>\n<parameter=v>\n{t}\n</parameter>\n"
                                                 "</function>\n</tool_call>"),
    "seed_oss": ("seed_oss", lambda t, v: f"<seed:tool_call>\n<function=f>\n<parameter=v>{t}</parameter>\n</function>\n"
                                          "</seed:tool_call>"),
    "mimo (XML)": ("mimo", lambda t, v: f"<tool_call>\n<function=f>\n<parameter=v>{t}</parameter>\n</function>\n</tool_call>"),
    "minimax-m2": ("minimax-m2", lambda t, v: f'<minimax:tool_call>\n<invoke name="f">\n<parameter name="v">{t}</parameter>\n'
                                              "</invoke>\n</minimax:tool_call>"),
    "glm45": ("glm45", lambda t, v: f"<tool_call>f\n<arg_key>v</arg_key>\n<arg_value>{t}</arg_value>\n</tool_call>"),
    "glm47": ("glm47", lambda t, v: f"<tool_call>f<arg_key>v</arg_key><arg_value>{t}</arg_value></tool_call>"),
    "hunyuan (Hy3)": ("hunyuan", lambda t, v: "<tool_calls:opensource>\n<tool_call:opensource>f<tool_sep:opensource>\n"
                                              f"<arg_key:opensource>v</arg_key:opensource>\n<arg_value:opensource>{t}"
                                              "</arg_value:opensource>\n</tool_call:opensource>\n</tool_calls:opensource>"),
    "k2_horizon": ("k2_horizon", lambda t, v: f"<ifm|tool_calls>\n<ifm|tool_call>f\n<ifm|arg_key>v</ifm|arg_key>\n"
                                              f"<ifm|arg_value>{t}</ifm|arg_value>\n</ifm|tool_call>\n</ifm|tool_calls>"),
    "step3": ("step3", lambda t, v: f'<｜tool_calls_begin｜>\n<｜tool_call_begin｜>function<｜tool_sep｜><steptml:invoke name="f">\n'
                                    f'<steptml:parameter name="v">{t}</steptml:parameter>\n</steptml:invoke><｜tool_call_end｜>\n'
                                    "<｜tool_calls_end｜>"),
    "deepseekv32 (DSML)": ("deepseekv32", lambda t, v: f'<{D}function_calls>\n<{D}invoke name="f">\n<{D}parameter name="v" '
                                                        f'string="{_flag(v)}">{t}</{D}parameter>\n</{D}invoke>\n'
                                                        f"</{D}function_calls>"),
    "deepseekv4 (DSML)": ("deepseekv4", lambda t, v: f'<{D}tool_calls>\n<{D}invoke name="f">\n<{D}parameter name="v" '
                                                      f'string="{_flag(v)}">{t}</{D}parameter>\n</{D}invoke>\n</{D}tool_calls>'),
    "gigachat3 (GCML)": ("gigachat3", lambda t, v: f'<{G}tool_calls><{G}invoke name="f">\n<{G}parameter name="v" '
                                                    f'string="{_flag(v)}">{t}</{G}parameter>\n</{G}invoke></{G}tool_calls>'),
    "kimi_k3": ("kimi_k3", lambda t, v: f'<|open|>tools<|sep|><|open|>call tool="f" index="1"<|sep|><|open|>argument '
                                        f'key="v" type="{json_type(v)}"<|sep|>{t}<|close|>argument<|sep|><|close|>call<|sep|>'
                                        "<|close|>tools<|sep|>"),
    "gigachat35 (GCML)": ("gigachat35", lambda t, v: f'<{G}tool_calls>\n<{G}invoke name="f">\n<{G}parameter name="v" '
                                                      f'string="{_flag(v)}">{t}</{G}parameter>\n</{G}invoke>\n</{G}tool_calls>'),
    "dots": ("dots", lambda t, v: f'<dots_function_call><invoke name="f"><parameter name="v">{t}</parameter></invoke>'
                                  "</dots_function_call>"),
    "iquest_q1": ("iquest_q1", lambda t, v: f"<iquest_tool_call>f<arg_key>v</arg_key><arg_value>{t}</arg_value>"
                                            "</iquest_tool_call>"),
    "minicpm5": ("minicpm5", lambda t, v: f'<function name="f"><param name="v">{t}</param></function>'),
    "minimax-m3": ("minimax-m3", lambda t, v: f'{P}<tool_call>\n{P}<invoke name="f">{P}<v>{t}{P}</v>{P}</invoke>\n'
                                              f"{P}</tool_call>"),
}


#: formats that write each value's type beside it (DSML / GCML ``string="…"``, Kimi K3 ``type="…"``)
DECLARING = frozenset({"deepseekv32 (DSML)", "deepseekv4 (DSML)", "gigachat3 (GCML)", "gigachat35 (GCML)", "kimi_k3"})


def _parse(tool_parser: str, tools: list[dict[str, Any]], output: str, per_char: bool = False) -> list[tuple[str, Any]]:
    parser = build_response_parser(tools, tool_parser, None)
    events = []
    for chunk in (list(output) if per_char else [output]):
        events += parser.feed(chunk)
    message = fold(events + parser.end())
    return [(c.name, json.loads(c.arguments)) for c in message.calls]


@pytest.mark.parametrize("fmt", list(FORMATS))
@pytest.mark.parametrize(("label", "schema", "text", "value"), CASES, ids=[c[0] for c in CASES])
def test_every_format_types_values_by_the_one_rule(fmt: str, label: str, schema: Any, text: str, value: Any) -> None:
    tool_parser, markup = FORMATS[fmt]
    output = markup(text, value)
    tools = _tools(schema)
    if fmt in DECLARING and schema is None and isinstance(value, str):
        value = text  # the format declares the value a string: as written, quotes and all
    expected = [("f", {"v": value})]
    assert _parse(tool_parser, tools, output) == expected, output
    assert _parse(tool_parser, tools, output, per_char=True) == expected


def test_the_table_covers_the_kinds_and_combinators() -> None:
    written = json.dumps([c[1] for c in CASES])
    for word in ("integer", "number", "boolean", "null", "object", "array", "anyOf", "oneOf", "allOf", "$ref", "enum"):
        assert word in written, word
    assert any(c[1] is None for c in CASES)


# ------------------------------------------------------------------------ declarations and the schema

DECLARED: list[tuple[str, Any, str | None, str, Any]] = [
    # (label, schema, declared type — JSON: DSML string="false" —, text, value)
    ("no schema, declared JSON", None, JSON, "42", 42),
    ("no schema, declared JSON array", None, JSON, "[1, 2]", [1, 2]),
    ("no schema, declared JSON that is not JSON", None, JSON, "hello", "hello"),
    ("no schema, declared string", None, "string", "42", "42"),
    ("no schema, declared number", None, "number", "1.5", 1.5),
    ("string schema, declared JSON string literal", {"type": "string"}, JSON, '"hi"', "hi"),
    ("string schema, declared JSON object stays text", {"type": "string"}, JSON, '{"a": 1}', '{"a": 1}'),
    ("integer schema wins over a declared string", {"type": "integer"}, "string", "42", 42),
    ("object schema wins over a declared string", {"type": "object"}, "string", '{"a": 1}', {"a": 1}),
    ("a declared type picks among the schema's", {"anyOf": [{"type": "string"}, {"type": "integer"}]}, "integer", "7", 7),
    ("declared JSON picks the schema's non-string types",
     {"type": ["string", "integer", "boolean"]}, JSON, "true", True),
    ("a declared type the schema does not allow", {"type": "string"}, "object", '{"a": 1}', '{"a": 1}'),
    ("declared null", {"type": "string"}, "null", "null", None),
]


@pytest.mark.parametrize(("label", "schema", "declared", "text", "value"), DECLARED, ids=[c[0] for c in DECLARED])
def test_a_declared_type_and_the_schema(label: str, schema: Any, declared: str | None, text: str, value: Any) -> None:
    typed = arg_type(schema, {"$defs": DEFS}, declared)
    assert typed.convert(text) == value


def test_declarations_in_the_formats_themselves() -> None:
    tools = _tools(None)
    dsml = f'<{D}tool_calls>\n<{D}invoke name="f">\n<{D}parameter name="v" string="false">[1, 2]</{D}parameter>\n</{D}invoke>'
    assert _parse("deepseekv4", tools, dsml + f"\n</{D}tool_calls>") == [("f", {"v": [1, 2]})]
    k3 = ('<|open|>tools<|sep|><|open|>call tool="f" index="1"<|sep|><|open|>argument key="v" type="number"<|sep|>'
          "2.5<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|>")
    assert _parse("kimi_k3", tools, k3) == [("f", {"v": 2.5})]
    typed_tools = _tools({"type": "integer"})
    dsml_true = dsml.replace('string="false">[1, 2]', 'string="true">12')
    assert _parse("deepseekv4", typed_tools, dsml_true + f"\n</{D}tool_calls>") == [("f", {"v": 12})]


def test_schema_kinds() -> None:
    assert schema_kinds(None) == ((), False)
    assert schema_kinds({"type": ["integer", "null", "boolean"]}) == (("integer", "boolean"), True)
    assert schema_kinds({"type": "string", "nullable": True}) == (("string",), True)
    assert schema_kinds({"anyOf": [{"$ref": "#/$defs/Point"}, {"type": "null"}]}, {"$defs": DEFS}) == (("object",), True)
    assert schema_kinds({"enum": ["a", 1, None]}) == (("string", "integer"), True)
    assert schema_kinds({"type": "varchar(255)"}) == (("string",), False)
    assert schema_kinds({"type": "list[int]"}) == (("array",), False)
    assert schema_kinds({"$ref": "#/$defs/Missing"}, {"$defs": DEFS}) == ((), False)
    assert ArgType().streams and not ArgType(("string",), encoded=True).streams
