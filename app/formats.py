"""The server's format resolution, made once when its parsers are chosen (``Formats.of``): the
reasoning and tool-call detector classes, the tool format's wire, the marker strings the backend
must keep as text, and the label metrics use."""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from app.constraints.tools import ReasoningGate
from app.conversation import Call, Turn
from app.parser_choice import ParserChoice
from app.templates.prompt import CallText, json_call_text
from parsers.registry import reasoning_detector_class, tool_detector_class
from parsers.wire import WireFormat


@dataclass(frozen=True)
class Formats:
    """The model's output formats (see the module docstring)."""

    reasoning: type | None = None
    tools: type | None = None
    wire: WireFormat | None = None
    tool_markers: tuple[str, ...] = ()
    reasoning_markers: tuple[str, ...] = ()
    label: str = "none"

    @classmethod
    def of(cls, choice: ParserChoice) -> Formats:
        reasoning = reasoning_detector_class(choice.reasoning) if choice.reasoning else None
        tools = tool_detector_class(choice.tools) if choice.tools else None
        return cls(reasoning, tools, tools.wire if tools else None, tuple(tools.markers) if tools else (),
                   tuple(reasoning.markers()) if reasoning else (), label_of(choice.tools))

    def starts_inside_reasoning(self, prompt: str) -> bool:
        """Whether output after ``prompt`` starts inside a reasoning block: the prompt's tail
        decides (a template that opened the block, or closed an empty one); else the parser's default."""
        if self.reasoning is None:
            return False
        detector = self.reasoning()
        start = detector.initial_state(prompt)
        return bool(detector.force_reasoning if start is None else start)

    def continuation(self, final: Turn, inside: bool) -> str:
        """The text after the prompt that continues ``final``, a prefilled assistant message, for
        a prompt that leaves the output ``inside`` a reasoning block or not: its thought and its
        text in the reasoning format's markers (``ReasoningDetector.continuation``: the thought
        stays open when the message has no text yet); its text alone where no reasoning parser runs."""
        if self.reasoning is None:
            return final.text
        return str(self.reasoning().continuation(inside, final.reasoning or "", final.text, bool(final.text)))

    def reasoning_gate(self, inside: bool) -> ReasoningGate | None:
        """The reasoning block a grammar must leave free before forced calls."""
        return ReasoningGate.of(self.reasoning(), inside) if self.reasoning is not None else None

    def markers(self, tools_active: bool) -> tuple[str, ...]:
        """Marker strings the backend must keep as text for the parsers that will run."""
        return self._kept[tools_active]

    @functools.cached_property
    def _kept(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """``markers(False)`` and ``markers(True)``, worked out once."""
        def kept(found: Sequence[str]) -> tuple[str, ...]:
            return tuple(dict.fromkeys(m for m in found if m))
        return kept(self.reasoning_markers), kept((*self.reasoning_markers, *self.tool_markers))

    def call_text(self) -> CallText:
        """How earlier calls are written into a prompt whose template does not render them: in the
        tool format's own wire format, else as JSON lines — the same function every time (a render
        that continues another knows its settings again: ``app.templates.prompt.Derived``)."""
        return self._call_text

    @functools.cached_property
    def _call_text(self) -> CallText:
        wire = self.wire
        if wire is None:
            return json_call_text

        def write(calls: Sequence[Call]) -> str:
            rendered = []
            for call in calls:
                arguments: Any = call.arguments
                if isinstance(arguments, str):
                    try:
                        arguments = orjson.loads(arguments)
                    except orjson.JSONDecodeError:
                        arguments = {}
                rendered.append((call.name, arguments if isinstance(arguments, Mapping) else {}))
            return wire.render(rendered)

        return write


def label_of(parser: str | type | None) -> str:
    if parser is None:
        return "none"
    return parser if isinstance(parser, str) else str(getattr(parser, "label", parser.__name__))
