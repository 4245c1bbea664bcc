"""How a format *writes* tool calls — the data constrained decoding needs (like SGLang's
``structure_info``): grammars and structural tags are generated from it, in the detector's own
wire format, so a constrained model writes exactly what the detector parses.

Templates use ``string.Template`` placeholders: ``$name`` (the tool name), ``$args`` (the
arguments: a JSON object, or the rendered parameters for XML-style formats), ``$index`` (the
call's position, where the format numbers calls). Parameter templates use ``$key``, ``$value`` and
``$is_string`` (``true``/``false``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from string import Template
from typing import Any


@dataclass(frozen=True)
class WireFormat:
    call: str  # template of one call, e.g. '<tool_call>\n{"name": "$name", "arguments": $args}\n</tool_call>'
    section: tuple[str, str] = ("", "")  # text around the run of calls (Kimi, DeepSeek)
    separator: str = ""  # text between two calls
    params: str | None = None  # XML-style parameters: template of one parameter; None = JSON arguments
    string_value_end: str = ""  # text a string parameter value can never contain (its closing tag)

    @property
    def trigger(self) -> str:
        """The word that begins tool output (lazy-grammar trigger): the first line of the section
        opener or of the call's literal prefix."""
        return (self.section[0] or self.call_prefix).strip().split("\n")[0]

    @property
    def call_prefix(self) -> str:
        """The literal text of a call before its first placeholder."""
        return self.call.split("$", 1)[0]

    def split_call(self, name: str, index: int = 0) -> tuple[str, str]:
        """The literal text before and after ``$args`` for one call of ``name``."""
        before, _, after = self.call.partition("$args")
        values = {"name": name, "index": str(index)}
        return Template(before).safe_substitute(values), Template(after).safe_substitute(values)

    def render_params(self, arguments: Mapping[str, Any]) -> str:
        assert self.params is not None
        out = []
        for key, value in arguments.items():
            is_string = isinstance(value, str)
            text = value if is_string else json.dumps(value, ensure_ascii=False)
            out.append(Template(self.params).substitute(key=key, value=text, is_string=str(is_string).lower()))
        return "".join(out)

    def render(self, calls: list[tuple[str, Mapping[str, Any]]]) -> str:
        """The model output for these calls — what the detector must parse back (used by tests)."""
        parts = []
        for index, (name, arguments) in enumerate(calls):
            args = self.render_params(arguments) if self.params is not None else json.dumps(arguments, ensure_ascii=False)
            before, after = self.split_call(name, index)
            parts.append(before + args + after)
        return self.section[0] + self.separator.join(parts) + self.section[1]
