"""Turn vLLM's tool-parser test files into a JSON table of cases (test data only, no vLLM code).

Usage: ``python -m bench.vllm_extract VLLM_CHECKOUT COMMIT [OUT]`` where VLLM_CHECKOUT holds vLLM's
``tests/`` tree at COMMIT. The test files are read with :mod:`ast`, never imported or run. Three
shapes are understood, each giving ``(model_output, expectations)`` pairs:

* ``ToolParserTestConfig(...)`` objects (vLLM's shared per-parser suite): one case per common test;
* ``pytest.mark.parametrize`` tables with a model-output column and an expected-calls column;
* plain test functions that bind one literal model output and assert on the result with literal
  values (``len(tool_calls) == 2``, ``tool_calls[0].function.name == "x"``,
  ``json.loads(...arguments) == {...}``, ``content == "..."``, ``tools_called``).

Values are evaluated by a small interpreter over literals, string concatenation, f-strings,
``json.dumps``, ``FunctionCall``/``ToolCall`` constructors, ``pytest.param`` and one-line helper
functions; anything else makes the case unextractable, and every unextractable or unscoreable test is
counted by reason in the output's ``skipped`` table.
"""

from __future__ import annotations

import ast
import json
import sys
import textwrap
from collections import Counter
from pathlib import Path
from typing import Any, Self

TEST_DIRS = ("tests/tool_parsers", "tests/entrypoints/openai/tool_parsers", "tests/tool_use")
CALL_FUNCS = {
    "extract_tool_calls", "run_tool_extraction", "run_tool_extraction_nonstreaming",
    "run_tool_extraction_streaming", "_extract", "extract", "parse",
}
OUTPUT_COLUMNS = ("model_output", "output", "text", "model_text", "input_text", "response_text")
CALLS_COLUMNS = ("expected_tool_calls", "expected_calls", "expected_tool_call")
NEEDS_STATE = ("tokenizer", "encode(", "decode(", "get_tokenizer", "delta_token_ids", "MagicMock", "monkeypatch")


class Unsupported(Exception):
    """A value the interpreter does not evaluate."""


class Evaluator:
    """Evaluates test-data expressions against module-level names."""

    def __init__(self, tree: ast.Module) -> None:
        self.env: dict[str, Any] = {}
        self.helpers: dict[str, ast.FunctionDef] = {}
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and not node.name.startswith("test"):
                self.helpers[node.name] = node
            elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
                self.bind(node, self.env)

    def bind(self, node: ast.Assign | ast.AnnAssign | ast.AugAssign, env: dict[str, Any]) -> None:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        if node.value is None:
            return
        try:
            if isinstance(node, ast.AugAssign):
                if not isinstance(node.op, ast.Add):
                    raise Unsupported("augmented assignment")
                value = self.eval(node.target, env) + self.eval(node.value, env)  # type: ignore[arg-type]
            else:
                value = self.eval(node.value, env)
        except Unsupported:
            for target in targets:
                if isinstance(target, ast.Name):
                    env.pop(target.id, None)
            return
        for target in targets:
            if isinstance(target, ast.Name):
                env[target.id] = value

    def eval(self, node: ast.expr, env: dict[str, Any] | None = None) -> Any:  # noqa: C901
        env = self.env if env is None else env
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            if node.id in env:
                return env[node.id]
            if node.id in self.env:
                return self.env[node.id]
            raise Unsupported(node.id)
        if isinstance(node, ast.JoinedStr):
            parts = []
            for value in node.values:
                if isinstance(value, ast.Constant):
                    parts.append(str(value.value))
                elif isinstance(value, ast.FormattedValue):
                    inner = self.eval(value.value, env)
                    parts.append(repr(inner) if value.conversion == ord("r") else str(inner))
                else:
                    raise Unsupported("f-string part")
            return "".join(parts)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            return self.eval(node.left, env) + self.eval(node.right, env)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
            return self.eval(node.left, env) * self.eval(node.right, env)
        if isinstance(node, ast.List | ast.Tuple):
            items: list[Any] = []
            for elt in node.elts:
                if isinstance(elt, ast.Starred):
                    items.extend(self.eval(elt.value, env))
                else:
                    items.append(self.eval(elt, env))
            return items if isinstance(node, ast.List) else tuple(items)
        if isinstance(node, ast.Dict):
            out: dict[Any, Any] = {}
            for key, value in zip(node.keys, node.values, strict=True):
                if key is None:
                    out.update(self.eval(value, env))
                else:
                    out[self.eval(key, env)] = self.eval(value, env)
            return out
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -self.eval(node.operand, env)
        if isinstance(node, ast.Subscript):
            return self.eval(node.value, env)[self.eval(node.slice, env)]
        if isinstance(node, ast.Call):
            return self.call(node, env)
        raise Unsupported(type(node).__name__)

    def call(self, node: ast.Call, env: dict[str, Any]) -> Any:
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        kwargs = {k.arg: k.value for k in node.keywords if k.arg}
        if name == "dumps":
            extra = {k: self.eval(v, env) for k, v in kwargs.items() if k in ("ensure_ascii", "indent", "separators")}
            return json.dumps(self.eval(node.args[0], env), **extra)
        if name == "loads" and node.args:
            return json.loads(self.eval(node.args[0], env))
        if name == "FunctionCall":
            return {"name": self.eval(kwargs["name"], env), "arguments": self.eval(kwargs["arguments"], env)}
        if name in ("ToolCall", "DeltaToolCall"):
            return self.eval(kwargs["function"] if "function" in kwargs else node.args[0], env)
        if name == "param":  # pytest.param
            marks = kwargs.get("marks")
            xfail = marks is not None and "xfail" in ast.unparse(marks)
            row_id = self.eval(kwargs["id"], env) if "id" in kwargs else None
            return ParamRow(tuple(self.eval(a, env) for a in node.args), xfail, row_id)
        if name == "dict":
            return {k: self.eval(v, env) for k, v in kwargs.items()}
        if name == "dedent":
            return textwrap.dedent(self.eval(node.args[0], env))
        if name == "strip" and isinstance(func, ast.Attribute) and not node.args:
            return self.eval(func.value, env).strip()
        if name == "join" and isinstance(func, ast.Attribute) and len(node.args) == 1:
            return self.eval(func.value, env).join(self.eval(node.args[0], env))
        if name in ("ChatCompletionToolsParam", "FunctionDefinition", "ChatCompletionNamedToolChoiceParam"):
            return {k: self.eval(v, env) for k, v in kwargs.items()}
        if isinstance(func, ast.Name) and func.id in self.helpers:
            return self.run_helper(self.helpers[func.id], node, env)
        raise Unsupported(f"call {name}")

    def run_helper(self, helper: ast.FunctionDef, node: ast.Call, env: dict[str, Any]) -> Any:
        body = [s for s in helper.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
        if len(body) != 1 or not isinstance(body[0], ast.Return) or body[0].value is None:
            raise Unsupported(f"helper {helper.name}")
        params = [a.arg for a in helper.args.args]
        local: dict[str, Any] = {}
        defaults = helper.args.defaults
        for param, default in zip(params[len(params) - len(defaults):], defaults, strict=True):
            local[param] = self.eval(default, env)
        for param, arg in zip(params, node.args, strict=False):
            local[param] = self.eval(arg, env)
        for kw in node.keywords:
            if kw.arg:
                local[kw.arg] = self.eval(kw.value, env)
        return self.eval(body[0].value, {**env, **local})


class ParamRow(tuple):  # type: ignore[type-arg]
    """A ``pytest.param`` row: its values, and whether vLLM marks it xfail."""

    xfail: bool
    row_id: str | None

    def __new__(cls, values: tuple[Any, ...], xfail: bool, row_id: str | None = None) -> Self:
        row = super().__new__(cls, values)
        row.xfail, row.row_id = xfail, row_id
        return row


def _calls(value: Any) -> list[dict[str, Any]]:
    """Expected calls as ``[{"name", "arguments"}]`` with arguments parsed."""
    out = []
    for call in value or []:
        arguments = call["arguments"]
        out.append({"name": call["name"], "arguments": json.loads(arguments) if isinstance(arguments, str) else arguments})
    return out


class FileExtractor:
    """Extracts the cases of one test file."""

    def __init__(self, path: Path, rel: str, parser: str) -> None:
        self.source = path.read_text()
        self.tree = ast.parse(self.source)
        self.rel, self.parser = rel, parser
        self.ev = Evaluator(self.tree)
        self.cases: list[dict[str, Any]] = []
        self.skipped: Counter[str] = Counter()
        self.tools = self._file_tools()

    def _file_tools(self) -> list[dict[str, Any]]:
        tools: dict[str, dict[str, Any]] = {}
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "ChatCompletionToolsParam":
                try:
                    tool = self.ev.eval(node)
                except (Unsupported, KeyError, TypeError, ValueError):
                    continue
                function = tool.get("function")
                if isinstance(function, dict) and isinstance(function.get("name"), str):
                    tools.setdefault(function["name"], {"type": "function", "function": function})
        return list(tools.values())

    def add(self, test: str, output: Any, expect: dict[str, Any], xfail: str | None = None) -> None:
        if isinstance(output, list) and output and all(isinstance(d, str) for d in output):
            output = "".join(output)  # a list of stream deltas: the whole text (every chunking is run anyway)
        if not isinstance(output, str):
            self.skipped["model output is not a string"] += 1
            return
        names = [c.get("name") for c in expect.get("calls", [])]
        known = {t["function"]["name"] for t in self.tools}
        tools = self.tools if names and known and set(names) <= known else None
        case = {"id": f"{self.rel}::{test}#{len(self.cases)}", "parser": self.parser, "model_output": output,
                "expect": expect, "tools": tools, "vllm_xfail": xfail}
        self.cases.append(case)

    def run(self) -> None:
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "ToolParserTestConfig":
                self.config(node)
        for fn in self._test_functions():
            if not self._table(fn):
                self._inline(fn)

    def _test_functions(self) -> list[ast.FunctionDef]:
        return [n for n in ast.walk(self.tree) if isinstance(n, ast.FunctionDef) and n.name.startswith("test")]

    # -- ToolParserTestConfig ------------------------------------------------------------------
    def config(self, node: ast.Call) -> None:
        kw: dict[str, Any] = {}
        for k in node.keywords:
            try:
                kw[k.arg or ""] = self.ev.eval(k.value)
            except Unsupported:
                self.skipped[f"config field {k.arg} not literal"] += 1
        xs, xn = kw.get("xfail_streaming", {}), kw.get("xfail_nonstreaming", {})

        def xfail(test: str) -> str | None:
            return xs.get(test) or xn.get(test)

        name = kw.get("single_tool_call_expected_name", "get_weather")
        args = kw.get("single_tool_call_expected_args", {"city": "Tokyo"})
        pnames = kw.get("parallel_tool_calls_names", ["get_weather", "get_time"])
        self.add("test_no_tool_calls", kw.get("no_tool_calls_output"),
                 {"count": 0, "content": kw.get("no_tool_calls_output"), "content_exact": True}, xfail("test_no_tool_calls"))
        single: dict[str, Any] = {"count": 1, "calls": [{"name": name, "arguments": args}], "args_mode": "subset"}
        if kw.get("single_tool_call_expected_content") is not None:
            single["content"] = kw["single_tool_call_expected_content"]
        self.add("test_single_tool_call_simple_args", kw.get("single_tool_call_output"), single,
                 xfail("test_single_tool_call_simple_args"))
        parallel: dict[str, Any] = {"count": kw.get("parallel_tool_calls_count", 2),
                                    "calls": [{"name": n} for n in pnames], "args_mode": "none"}
        if kw.get("parallel_tool_calls_expected_content") is not None:
            parallel["content"] = kw["parallel_tool_calls_expected_content"]
        self.add("test_parallel_tool_calls", kw.get("parallel_tool_calls_output"), parallel, xfail("test_parallel_tool_calls"))
        self.add("test_various_data_types", kw.get("various_data_types_output"), {"count": 1, "args_mode": "nonempty"},
                 xfail("test_various_data_types"))
        self.add("test_empty_arguments", kw.get("empty_arguments_output"), {"count": 1, "args_mode": "empty"},
                 xfail("test_empty_arguments"))
        self.add("test_surrounding_text", kw.get("surrounding_text_output"), {"min_count": 1},
                 xfail("test_surrounding_text"))
        self.add("test_escaped_strings", kw.get("escaped_strings_output"), {"count": 1, "args_mode": "nonempty"},
                 xfail("test_escaped_strings"))
        self.skipped["config malformed_input (asserts only no crash)"] += len(kw.get("malformed_input_outputs", []))

    # -- parametrize tables ------------------------------------------------------------------
    def _table(self, fn: ast.FunctionDef) -> bool:
        for dec in fn.decorator_list:
            if not (isinstance(dec, ast.Call) and ast.unparse(dec.func).endswith("parametrize")):
                continue
            kw = {k.arg: k.value for k in dec.keywords if k.arg}
            names_node = dec.args[0] if dec.args else kw.get("argnames")
            values_node = dec.args[1] if len(dec.args) > 1 else kw.get("argvalues")
            if names_node is None or values_node is None:
                continue
            try:
                names = self.ev.eval(names_node)
                ids = self.ev.eval(kw["ids"]) if "ids" in kw else None
            except Unsupported:
                continue
            cols = [c.strip() for c in names.split(",")] if isinstance(names, str) else list(names)
            out_col = next((c for c in cols if c in OUTPUT_COLUMNS), None)
            calls_col = next((c for c in cols if c in CALLS_COLUMNS), None)
            names_col = "expected_names" if "expected_names" in cols else None
            if out_col is None or (calls_col is None and names_col is None):
                continue
            try:
                rows = self.ev.eval(values_node)
            except (Unsupported, KeyError, TypeError, ValueError) as exc:
                self.skipped[f"table not literal ({exc})"[:80]] += 1
                return True
            for number, row in enumerate(rows):
                row_id = getattr(row, "row_id", None) or (ids[number] if isinstance(ids, list) and number < len(ids) else None)
                values = dict(zip(cols, row, strict=False)) if len(cols) > 1 else {cols[0]: row}
                try:
                    expect: dict[str, Any] = {"args_mode": "exact"}
                    if calls_col is not None:
                        expect["calls"] = _calls(values[calls_col])
                    else:
                        args_list = values.get("expected_args_list") or [None] * len(values[names_col or ""])
                        expect["calls"] = [{"name": n, **({"arguments": a} if a is not None else {})}
                                           for n, a in zip(values[names_col or ""], args_list, strict=True)]
                    expect["count"] = len(expect["calls"])
                    if "expected_content" in values:
                        expect["content"] = values["expected_content"]
                except (KeyError, TypeError, ValueError, json.JSONDecodeError) as exc:
                    self.skipped[f"table row not understood ({type(exc).__name__})"] += 1
                    continue
                test = f"{fn.name}[{row_id}]" if row_id else fn.name
                self.add(test, values[out_col], expect, "xfail" if getattr(row, "xfail", False) else None)
            return True
        return False

    # -- inline tests --------------------------------------------------------------------------
    def _inline(self, fn: ast.FunctionDef) -> None:  # noqa: C901
        text = ast.get_source_segment(self.source, fn) or ""
        if any(marker in text for marker in ("extract_tool_calls_streaming", "stream_interval", "delta_text")) \
                and "run_tool_extraction" not in text:
            self.skipped["drives vLLM's streaming API by hand (token deltas)"] += 1
            return
        env: dict[str, Any] = {}
        output: Any = None
        outputs = 0
        parses = 0
        expect: dict[str, Any] = {"args_mode": "exact"}
        calls: dict[int, dict[str, Any]] = {}
        aliases: dict[str, int] = {}
        for stmt in ast.walk(fn):
            if isinstance(stmt, ast.Assign | ast.AnnAssign):
                self.ev.bind(stmt, env)
                target = stmt.targets[0] if isinstance(stmt, ast.Assign) else stmt.target
                value = stmt.value
                if isinstance(target, ast.Name) and isinstance(value, ast.Subscript) and isinstance(value.slice, ast.Constant) \
                        and ast.unparse(value.value).endswith("tool_calls"):
                    aliases[target.id] = int(value.slice.value)
            if isinstance(stmt, ast.Call):
                fname = stmt.func.attr if isinstance(stmt.func, ast.Attribute) else getattr(stmt.func, "id", "")
                if fname in CALL_FUNCS:
                    parses += 1
                    if any(k.arg == "token_ids" for k in stmt.keywords):
                        self.skipped["parses token ids from a tokenizer (harmony encoding), not text"] += 1
                        return
                    arg = next((a for a in stmt.args if not (isinstance(a, ast.Name) and "parser" in a.id)), None)
                    arg = arg or next((k.value for k in stmt.keywords if k.arg in ("model_output", "text")), None)
                    if arg is not None:
                        try:
                            output = self.ev.eval(arg, env)
                            outputs += 1
                        except (Unsupported, KeyError, TypeError):
                            pass
            if isinstance(stmt, ast.Assert):
                self._assert(stmt.test, expect, calls, aliases, env)
        if outputs != 1:
            reason = ("several model outputs in one test" if outputs > 1 else "model output not literal" if parses
                      else "unit test of a vLLM internal (parses no model output)")
            self.skipped[reason] += 1
            return
        if calls:
            expect["calls"] = [calls.get(i, {}) for i in range(max(calls) + 1)]
        if not (set(expect) - {"args_mode"}):
            self.skipped["no literal expectation in asserts"] += 1
            return
        if "count" not in expect and "calls" in expect and expect.get("called") is not False:
            expect["min_count"] = len(expect["calls"])
        if "calls" in expect and any("arguments" not in c for c in expect["calls"]):
            expect["args_mode"] = "given"
        self.add(fn.name, output, expect)

    def _assert(self, test: ast.expr, expect: dict[str, Any], calls: dict[int, dict[str, Any]],
                aliases: dict[str, int], env: dict[str, Any]) -> None:
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not) and ast.unparse(test.operand).endswith("tools_called"):
            expect["called"] = False
            return
        if ast.unparse(test).endswith("tools_called"):
            expect["called"] = True
            return
        if not (isinstance(test, ast.Compare) and len(test.ops) == 1):
            return
        left, op, right = test.left, test.ops[0], test.comparators[0]
        lsrc = ast.unparse(left)
        try:
            value = None if isinstance(right, ast.Constant) and right.value is None else self.ev.eval(right, env)
        except (Unsupported, KeyError, TypeError, ValueError):
            return
        eq = isinstance(op, ast.Eq | ast.Is)
        if lsrc.endswith("tools_called") and eq and isinstance(value, bool):
            expect["called"] = value
        elif lsrc.startswith("len(") and lsrc.endswith("tool_calls)") and eq and isinstance(value, int):
            expect["count"] = value
        elif lsrc.endswith("tool_calls") and eq and value == []:
            expect["count"] = 0
        elif (lsrc == "content" or lsrc.endswith(".content")) and eq and (value is None or isinstance(value, str)):
            expect["content"] = value
        elif eq and lsrc.endswith(".function.name") and isinstance(value, str):
            index = self._index(lsrc.removesuffix(".function.name"), aliases)
            if index is not None:
                calls.setdefault(index, {})["name"] = value
        elif eq and lsrc.startswith("json.loads(") and lsrc.endswith(".function.arguments)") and isinstance(value, dict):
            index = self._index(lsrc.removeprefix("json.loads(").removesuffix(".function.arguments)"), aliases)
            if index is not None:
                calls.setdefault(index, {})["arguments"] = value

    @staticmethod
    def _index(src: str, aliases: dict[str, int]) -> int | None:
        if src in aliases:
            return aliases[src]
        if src.endswith("]") and "tool_calls[" in src:
            inner = src.rsplit("[", 1)[1].rstrip("]")
            return int(inner) if inner.isdigit() else None
        return None


def parser_of(path: Path) -> str:
    """vLLM's parser name for a test file: its file name between ``test_`` and ``_tool_parser``."""
    return path.stem.removeprefix("test_").removesuffix("_tool_parser")


def extract(root: Path, commit: str) -> dict[str, Any]:
    cases: list[dict[str, Any]] = []
    skipped: dict[str, dict[str, int]] = {}
    for test_dir in TEST_DIRS:
        for path in sorted((root / test_dir).glob("test_*.py")):
            rel = str(path.relative_to(root))
            if not path.stem.endswith("_tool_parser"):
                skipped[rel] = {"not a parser test (needs a live server or model)": len(
                    [n for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.FunctionDef) and n.name.startswith("test")])}
                continue
            fx = FileExtractor(path, rel, parser_of(path))
            fx.run()
            cases += fx.cases
            if fx.skipped:
                skipped[rel] = dict(fx.skipped)
    return {"vllm_commit": commit, "source": "vllm-project/vllm tests (tool parser tests), extracted by bench/vllm_extract.py",
            "cases": cases, "skipped": skipped}


def main(argv: list[str]) -> int:
    root, commit = Path(argv[0]), argv[1]
    out = Path(argv[2]) if len(argv) > 2 else Path(__file__).parent / "data" / "vllm_tool_parser_cases.json"
    data = extract(root, commit)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    total_skipped = sum(sum(v.values()) for v in data["skipped"].values())
    print(f"{len(data['cases'])} cases, {total_skipped} skipped tests/rows -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
