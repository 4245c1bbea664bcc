"""Stand-ins that let SGLang's parser modules import without SGLang's heavy dependencies.

Used only inside the bench's SGLang venv (``bench/out/sglang-venv``), never by toolwire.
``sglang.srt.function_call`` and ``sglang.srt.parser`` need a few light packages (installed in
that venv: pydantic, openai, orjson, msgspec, partial_json_parser, regex) and mention heavy ones
(torch, transformers, xgrammar, IPython, numpy …) only for type hints, constrained-decoding
helpers and utilities the streaming parsers never call. ``install()``:

* puts an import hook *last* on ``sys.meta_path``: a package in ``HEAVY`` that is not installed
  imports as a stand-in module whose attributes are placeholder classes (pydantic accepts them as
  ``Any``);
* registers the ``sglang`` package without running its ``__init__`` (which imports torch).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from typing import Any

HEAVY = frozenset({"torch", "transformers", "xgrammar", "IPython", "numpy", "triton", "PIL", "pybase64",
                   "requests", "psutil", "tqdm", "openai_harmony"})


def _any_schema(cls: type, source: Any, handler: Any) -> Any:
    from pydantic_core import core_schema

    return core_schema.any_schema()


class _StandIn(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        value = type(name, (), {"__init__": lambda self, *a, **k: None,
                                "__get_pydantic_core_schema__": classmethod(_any_schema)})
        setattr(self, name, value)
        return value


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname.split(".")[0] in HEAVY:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = _StandIn(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        pass


def install() -> list[str]:
    """Install the stand-ins; returns the heavy packages that will be stood in for."""
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.append(_Finder())  # last: real packages win
    if "sglang" not in sys.modules:
        spec = importlib.util.find_spec("sglang")
        if spec is None or not spec.submodule_search_locations:
            raise ImportError("sglang is not installed in this interpreter")
        package = types.ModuleType("sglang")
        package.__path__ = list(spec.submodule_search_locations)
        sys.modules["sglang"] = package
    specs = {name: importlib.util.find_spec(name) for name in HEAVY}
    return sorted(name for name, spec in specs.items() if spec is None or isinstance(spec.loader, _Finder))
