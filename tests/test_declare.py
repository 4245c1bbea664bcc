"""The declaration side: ``WireFormat`` and its encodings, ``ToolFormat`` and what a detector class
derives from it, the ``parsers.declare`` facade, and the package boundaries."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

import parsers.declare
from parsers.declare import (
    BEAM,
    HARMONY,
    JSON_ARGS,
    MUSE,
    PYTHON_KWARGS,
    ObjectNotation,
    ToolCallDetector,
    ToolFormat,
    WireFormat,
    XmlParams,
    harmony,
    tagged_json,
)
from parsers.registry import TOOL_PARSERS, tool_detector_class
from parsers.wire import json_type, obj_key, obj_literal, py_literal

ROOT = Path(__file__).resolve().parent.parent


def test_wire_render_fills_names_indexes_and_ordinals() -> None:
    wire = WireFormat("<c id=$index n=$ordinal>$name:$args</c>", section=("<s>", "</s>"), separator=";")
    assert wire.render([("f", {"a": 1}), ("g", {})]) == '<s><c id=0 n=1>f:{"a": 1}</c>;<c id=1 n=2>g:{}</c></s>'
    assert wire.split_call("f", 4) == ("<c id=4 n=5>f:", "</c>")
    assert wire.trigger == "<s>" and wire.call_prefix == "<c id="
    assert WireFormat("$name\n$args", trigger_word="").trigger == ""
    assert WireFormat("<tool_call>\n{$args}").trigger == "<tool_call>"


def test_literal_dollars_survive_templates() -> None:
    wire = WireFormat("$$ $name $$args=$args")
    assert wire.render([("f", {})]) == "$ f $args={}" and wire.call_prefix == "$ "


def test_encodings() -> None:
    args = {"s": 'q"\n', "n": 1.5, "b": True, "z": None, "o": {"k": [1, "x"]}}
    assert json.loads(JSON_ARGS.render(args)) == args
    assert PYTHON_KWARGS.render(args) == 's="q\\"\\n", n=1.5, b=True, z=None, o={"k": [1, "x"]}'
    assert ObjectNotation("<|\"|>").render({"s": "a,b", "o": {"x y": 1, "": 2}}) == \
        '{s:<|"|>a,b<|"|>,o:{x y:1,<|"|><|"|>:2}}'
    xml = XmlParams('<p k="$key" t="$type" s="$is_string">$value</p>', string_end="</p>", escape_keys=True)
    assert xml.render({"a&b": "x", "n": [1]}) == '<p k="a&amp;b" t="string" s="true">x</p><p k="n" t="array" s="false">[1]</p>'
    cdata = XmlParams("<p>$value</p>", string_end="]]>", cdata=True)
    assert cdata.render({"s": "a]]>b", "o": {"t": "<&>"}}) == \
        '<p><![CDATA[a]]]]><![CDATA[>b]]></p><p>{"t": "&lt;&amp;&gt;"}</p>'
    with pytest.raises(ValueError):
        PYTHON_KWARGS.render({"x": float("nan")})


def test_value_spellings() -> None:
    assert [json_type(v) for v in ("", 1, 1.0, True, None, {}, [])] == \
        ["string", "integer", "number", "boolean", "null", "object", "array"]
    assert py_literal([None, False, "é"]) == '[None, False, "é"]'
    assert obj_literal([True, None, 2], "<e>") == "[true,null,2]"
    assert obj_key("plain key", "<e>") == "plain key"
    assert [obj_key(k, "<e>") for k in (" padded", "a:b", "a,b", "")] == ["<e> padded<e>", "<e>a:b<e>", "<e>a,b<e>",
                                                                        "<e><e>"]


def test_a_format_declares_everything_once() -> None:
    fmt = tagged_json("<tool_call>", "</tool_call>")
    assert fmt.start_markers == ("<tool_call>",) and fmt.markers == ("<tool_call>", "</tool_call>")
    assert fmt.wire is not None and fmt.wire.render([("f", {})]) == '<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>'
    merged = ToolFormat(read=fmt.read, start_markers=("<b>", "<b>"), markers=("<a>",))
    assert merged.start_markers == ("<b>",) and merged.markers == ("<a>", "<b>")  # start markers are markers too


def test_a_detector_class_exposes_its_format() -> None:
    fmt = tagged_json("<x>", "</x>", trim_around_calls=False)

    class X(ToolCallDetector):
        format = fmt

    class Y(X):
        """A subclass inherits the format (and its attributes)."""

    for cls in (X, Y):
        assert cls.wire is fmt.wire and cls.markers == fmt.markers and cls.start_markers == ("<x>",)
        assert cls.trim_around_calls is False and cls.handles_reasoning is False
    detector = Y(())
    detector.prepare("prompt")
    assert detector.prompt == "prompt" and detector.has_tool_call("a <x>") and not detector.has_tool_call("a")

    class Bare(ToolCallDetector):
        pass

    with pytest.raises(NotImplementedError):
        Bare().body(None, None)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", sorted(TOOL_PARSERS))
def test_registered_detectors_declare_a_format(name: str) -> None:
    cls = tool_detector_class(name)
    assert isinstance(cls.format, ToolFormat)
    assert cls.markers == cls.format.markers and cls.wire is cls.format.wire
    assert set(cls.start_markers) <= set(cls.markers)


def test_the_facade_exports_what_it_lists() -> None:
    assert len(set(parsers.declare.__all__)) == len(parsers.declare.__all__)
    for name in parsers.declare.__all__:
        assert hasattr(parsers.declare, name), name


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    found |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    return found


def test_detectors_import_only_the_facade() -> None:
    """Detectors import the facade, and the end-of-turn token table (data) they share."""
    for path in sorted((ROOT / "detectors").rglob("*.py")):
        ours = {m for m in _imports(path) if m.split(".")[0] in ("parsers", "app", "detectors")}
        assert ours <= {"parsers.declare", "detectors.turns"}, (path.name, ours)
    assert _imports(ROOT / "detectors" / "turns.py") <= {"__future__"}


def test_package_boundaries() -> None:
    """core imports nothing above it; shapes import core and the declaration types only; nothing in
    parsers or detectors imports app."""
    for path in sorted((ROOT / "parsers").rglob("*.py")):
        imports = {m for m in _imports(path) if m.split(".")[0] in ("parsers", "app", "detectors")}
        assert not any(m.startswith(("app", "detectors")) for m in imports), path
        if path.parent.name == "core":  # primitives: the core and the event types only
            assert all(m.startswith(("parsers.core", "parsers.events")) for m in imports), (path.name, imports)
        if path.parent.name == "shapes":
            assert all(m.startswith(("parsers.core", "parsers.shapes", "parsers.format", "parsers.wire",
                                     "parsers.tools")) for m in imports), (path.name, imports)


def test_one_harmony_dialect_writes_and_sniffs_every_envelope() -> None:
    """gpt-oss, Muse and Beam are data of one ``Dialect``: the call body (JSON, XML invokes, XML
    parameters) decides how calls are written and what shows one."""
    calls = [("get_weather", {"city": "Paris"}), ("get_time", {})]
    wires = {d: harmony(d).wire for d in (HARMONY, BEAM, MUSE)}
    assert all(wire is not None for wire in wires.values())
    assert wires[HARMONY].render(calls) == (
        '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}<|call|>'
        "<|start|>assistant<|channel|>commentary to=functions.get_time <|constrain|>json<|message|>{}<|call|>")
    assert wires[BEAM].render(calls) == (
        ' to=get_weather<|channel|>analysis <|constrain|>xml<|message|><rfl:parameter name="city">\nParis\n'
        "</rfl:parameter><|call|><|start|>assistant to=get_time<|channel|>analysis <|constrain|>xml<|message|><|call|>")
    assert wires[MUSE].render(calls[1:]) == (
        ' to=get_time<|message|><atem:function_calls>\n<atem:invoke name="get_time">\n</atem:invoke>\n'
        "</atem:function_calls>")
    assert harmony(HARMONY).has_tool_call("x to=functions.f<|message|>")
    assert harmony(BEAM).has_tool_call(" to=f<|channel|>analysis <|constrain|>xml<|message|>")
    assert harmony(MUSE).has_tool_call("<atem:function_calls>")
    assert not harmony(BEAM).has_tool_call("<|channel|>final<|message|>to=functions.f")
