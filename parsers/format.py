"""A tool-call format, declared once: one ``ToolFormat`` object from which the program that reads
the format, its markers, its start markers and the way it writes calls (``wire``) all come.

Shape builders (``parsers.shapes``: ``tagged_json``, ``named_json``, ``tagged_xml`` …) derive every
field from one spelling of the format, so a marker is written down once; formats that need code
build a ``ToolFormat`` around their own ``read`` program. A detector class declares its format::

    class Qwen25(ToolCallDetector):
        format = tagged_json(start="<tool_call>", end="</tool_call>", separator="\\n")

``read(ctx, cursor, out)`` is a generator function (the detector's program): it reads the whole
output and writes content and calls. It must not look at ``ctx`` before it is first resumed —
the detector learns the prompt (``ctx.prompt``) after the program is created.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field, replace
from typing import Protocol

from parsers.core.cursor import Cursor
from parsers.core.driver import Out
from parsers.tools import ToolSpec
from parsers.wire import WireFormat


class CallContext(Protocol):
    """What a format's program may know about the request: the offered tools (XML-style parameters
    are typed by their schemas) and the rendered prompt (start states: Harmony, Functionary v3.2)."""

    @property
    def tools_by_name(self) -> Mapping[str, ToolSpec]: ...

    @property
    def prompt(self) -> str | None: ...


#: a format's program: content and calls out of the whole output
Read = Callable[[CallContext, Cursor, Out], Generator[None, None, None]]
#: the same as a program over one call, after its opening marker (see ``parsers.shapes.sections``)
ReadCall = Callable[[CallContext, Cursor, Out, str], Generator[None, None, bool]]


def _unique(*groups: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(m for group in groups for m in group if m))


@dataclass(frozen=True, eq=False)
class ToolFormat:
    """One tool-call format (see the module docstring).

    ``markers`` is every marker text of the format (leak checks, tokens the backend must keep as
    text); the start markers and the content markup are included (after the listed ones) whether
    or not they were listed.
    """

    read: Read
    start_markers: tuple[str, ...]
    markers: tuple[str, ...] = ()
    #: how the format writes calls (``None`` only where no write form can be derived: learned
    #: formats with unusual parameters, whole-message response schemas)
    wire: WireFormat | None = None
    #: whether whitespace next to a call belongs to the markup rather than to the content
    trim_around_calls: bool = True
    #: the format also carries reasoning (its program writes it); no reasoning parser runs before it
    handles_reasoning: bool = False
    #: whether a text holds a call (SGLang's ``has_tool_call``); default: a start marker occurs in it
    sniff: Callable[[str], bool] | None = field(default=None)
    #: the format's response envelope (``<|START_RESPONSE|>`` … ``<|END_RESPONSE|>``): markers that
    #: wrap the answer, dropped from the content with the whitespace next to them wherever they occur
    content_markup: tuple[str, ...] = ()
    #: the format writes its calls inside the reasoning block (Arcee Trinity): a call start ends
    #: an open block at once, although the block's end marker may follow the calls
    calls_in_thought: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "start_markers", _unique(self.start_markers))
        object.__setattr__(self, "content_markup", _unique(self.content_markup))
        object.__setattr__(self, "markers", _unique(self.markers, self.start_markers, self.content_markup))

    def with_content_markup(self, *markup: str) -> ToolFormat:
        """The same format with a response envelope (for formats built by a shape builder)."""
        return replace(self, content_markup=(*self.content_markup, *markup))

    def with_calls_in_thought(self) -> ToolFormat:
        """The same format, declared to write its calls inside the reasoning block."""
        return replace(self, calls_in_thought=True)

    def has_tool_call(self, text: str) -> bool:
        if self.sniff is not None:
            return self.sniff(text)
        return any(m in text for m in self.start_markers)
