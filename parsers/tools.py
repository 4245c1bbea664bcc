"""Tool declarations as the parsers see them, normalised from whatever the caller holds.

Accepted inputs: OpenAI dicts (``{"type": "function", "function": {...}}``), bare function dicts
(``{"name": …, "parameters": …}``), and objects with a ``.function`` attribute (SGLang's and the
``openai`` SDK's pydantic models).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from parsers.core.args import resolve_ref


@dataclass(frozen=True, slots=True)
class ToolSpec:
    name: str
    parameters: Mapping[str, Any] = field(default_factory=dict)
    description: str | None = None
    strict: bool = False

    def param_schema(self, param: str) -> Mapping[str, Any] | None:
        """The JSON schema of one top-level parameter, if the tool declares it (a local ``$ref``
        followed; ``additionalProperties`` when it is a schema and the parameter is not listed)."""
        root = resolve_ref(self.parameters, self.parameters)
        if root is None:
            return None
        props = root.get("properties")
        schema = props.get(param) if isinstance(props, Mapping) else None
        if schema is None and isinstance(root.get("additionalProperties"), Mapping):
            schema = root["additionalProperties"]
        return resolve_ref(schema, self.parameters)


def _get(obj: Any, key: str) -> Any:
    if isinstance(obj, Mapping):
        return obj.get(key)
    return getattr(obj, key, None)


def to_spec(tool: Any) -> ToolSpec:
    """Normalise one tool declaration; raises ``ValueError`` if it has no function name."""
    if isinstance(tool, ToolSpec):
        return tool
    function = _get(tool, "function") or tool
    name = _get(function, "name")
    if not isinstance(name, str) or not name:
        raise ValueError(f"tool has no function name: {tool!r}")
    params = _get(function, "parameters")
    if params is not None and not isinstance(params, Mapping):
        dump = getattr(params, "model_dump", None)
        params = dump() if callable(dump) else dict(params)
    return ToolSpec(
        name=name,
        parameters=params or {},
        description=_get(function, "description"),
        strict=bool(_get(function, "strict")),
    )


def to_specs(tools: Iterable[Any] | None) -> tuple[ToolSpec, ...]:
    return tuple(to_spec(t) for t in tools or ())
