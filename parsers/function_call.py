"""Tool calls: find them in the model's normal text and stream them as deltas.

``ToolCallDetector`` is a format declaration (``format``: a ``parsers.format.ToolFormat``) bound to
one request's tools and prompt (see ``detectors/tools``).
``FunctionCallParser`` is the SGLang-compatible surface:

    parser = FunctionCallParser(tools, "qwen25")
    normal_text, calls = parser.parse_stream_chunk(chunk)   # calls: list[ToolCallItem]
    normal_text, calls = parser.finish()                    # at end of stream
    normal_text, calls = parser.parse_non_stream(text)

Each ``ToolCallItem`` has ``tool_index`` (the call's position in this response), ``name`` (on a
call's first item only) and ``parameters`` (a JSON text fragment; a call's fragments concatenate
to its arguments object). ``feed`` / ``end`` give the same output as ordered ``parsers.events``,
which is what the HTTP layer uses.
"""

from __future__ import annotations

from collections.abc import Generator, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from parsers.core.cursor import Cursor
from parsers.core.driver import Driver, Out
from parsers.events import CallArgs, CallStart, Content, Event
from parsers.fold import fold
from parsers.format import ToolFormat
from parsers.registry import tool_detector_class
from parsers.tools import ToolSpec, to_specs
from parsers.wire import WireFormat


class ToolCallDetector:
    """A tool-call format bound to one request: the tools offered (``tools_by_name``) and the
    rendered prompt (``prompt``, set by ``prepare``). A subclass declares ``format``; the class
    attributes below are copied from it when the class is created, so they can be read without
    an instance (``tool_detector_class(name).wire``). A detector without a format (one made for a
    single request, like the constrained-output readers) overrides ``body`` instead."""

    #: the format, declared once (see ``parsers.format``)
    format: ClassVar[ToolFormat | None] = None
    #: texts that begin tool-call output; they also end an unclosed reasoning block
    start_markers: ClassVar[tuple[str, ...]] = ()
    #: every marker text of the format (leak checks, backend token preservation)
    markers: ClassVar[tuple[str, ...]] = ()
    #: whether whitespace next to a call belongs to the markup rather than to the content
    trim_around_calls: ClassVar[bool] = True
    #: the format also carries reasoning (the program writes it); no reasoning parser runs before it
    handles_reasoning: ClassVar[bool] = False
    #: how the format writes calls, for constrained decoding (None: cannot be constrained)
    wire: ClassVar[WireFormat | None] = None
    #: the format's response envelope, dropped from the content (``ToolFormat.content_markup``)
    content_markup: ClassVar[tuple[str, ...]] = ()
    #: calls are written inside the reasoning block (``ToolFormat.calls_in_thought``)
    calls_in_thought: ClassVar[bool] = False
    #: end-of-turn tokens the model's templates close a turn with: never content when they are the
    #: last text of the output (``parsers.core.trailing``); declared per detector
    end_tokens: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        fmt = cls.__dict__.get("format")
        if isinstance(fmt, ToolFormat):
            cls.start_markers = fmt.start_markers
            cls.markers = fmt.markers
            cls.trim_around_calls = fmt.trim_around_calls
            cls.handles_reasoning = fmt.handles_reasoning
            cls.wire = fmt.wire
            cls.content_markup = fmt.content_markup
            cls.calls_in_thought = fmt.calls_in_thought

    def __init__(self, tools: Sequence[ToolSpec] = ()) -> None:
        self.tools = tuple(tools)
        self.tools_by_name: dict[str, ToolSpec] = {t.name: t for t in self.tools}
        self.prompt: str | None = None

    def body(self, cur: Cursor, out: Out) -> Generator[None, None, object]:
        """The detector's program over one response (the format's ``read`` with this detector as
        its context)."""
        if self.format is None:
            raise NotImplementedError(f"{type(self).__name__} declares no format and no body")
        return self.format.read(self, cur, out)

    def prepare(self, prompt: str | None) -> None:
        """Learn the rendered prompt before parsing starts (start states: Harmony, Functionary v3.2 …)."""
        self.prompt = prompt

    def has_tool_call(self, text: str) -> bool:
        if self.format is not None:
            return self.format.has_tool_call(text)
        return any(m in text for m in self.start_markers)


@dataclass
class ToolCallItem:
    """One streamed piece of a tool call (SGLang's shape)."""

    tool_index: int
    name: str | None = None
    parameters: str = ""


class FunctionCallParser:
    """Streaming tool-call parser over one detector (see the module docstring)."""

    def __init__(self, tools: Iterable[Any] | None, tool_call_parser: str | type | None = None, *,
                 detector: ToolCallDetector | None = None, max_calls: int | None = None) -> None:
        self.tools = to_specs(tools)
        if detector is None:
            if tool_call_parser is None:
                raise ValueError("FunctionCallParser needs a tool_call_parser name or a detector")
            detector = tool_detector_class(tool_call_parser)(self.tools)
        self.detector = detector
        self.tool_call_parser = tool_call_parser
        self.max_calls = max_calls  # calls beyond this many are content (a bound on one answer's work)
        self._program = self._new_program()

    def _new_program(self) -> Driver:
        known = frozenset(t.name for t in self.tools) if self.tools else None
        detector = self.detector
        return Driver(detector.body, trim_around_calls=detector.trim_around_calls, known_names=known,
                      max_calls=self.max_calls, content_markup=detector.content_markup, end_tokens=detector.end_tokens)

    @property
    def malformed_calls(self) -> int:
        """Calls so far that were malformed and passed through as content."""
        calls = self._program.out.calls
        return calls.passed_through - calls.capped

    @property
    def capped_calls(self) -> int:
        """Calls so far beyond ``max_calls``, passed through as content."""
        return self._program.out.calls.capped

    @property
    def unknown_tool_names(self) -> int:
        """Calls so far whose name is not among the offered tools (they are passed through)."""
        return self._program.out.calls.unknown_names

    # ------------------------------------------------------------------ event surface

    def feed(self, text: str) -> list[Event]:
        return self._program.feed(text)

    def end(self, truncated: bool = False) -> list[Event]:
        return self._program.finish(truncated)

    # ------------------------------------------------------------------ SGLang-compatible surface

    def has_tool_call(self, text: str) -> bool:
        return self.detector.has_tool_call(text)

    def parse_stream_chunk(self, chunk_text: str) -> tuple[str, list[ToolCallItem]]:
        return _items(self.feed(chunk_text))

    def finish(self, truncated: bool = False) -> tuple[str, list[ToolCallItem]]:
        return _items(self.end(truncated))

    def parse_non_stream(self, full_text: str) -> tuple[str, list[ToolCallItem]]:
        """Whole-output parse with a fresh program; unfinished calls are not calls."""
        program = self._new_program()
        message = fold(program.feed(full_text) + program.finish())
        calls = [ToolCallItem(c.index, c.name, c.arguments) for c in message.calls]
        return message.content, calls


def _items(events: list[Event]) -> tuple[str, list[ToolCallItem]]:
    normal: list[str] = []
    items: list[ToolCallItem] = []
    for event in events:
        if isinstance(event, Content):
            normal.append(event.text)
        elif isinstance(event, CallStart):
            items.append(ToolCallItem(event.index, event.name, ""))
        elif isinstance(event, CallArgs):
            last = items[-1] if items else None
            if last is not None and last.tool_index == event.index and last.name is None:
                last.parameters += event.text
            else:
                items.append(ToolCallItem(event.index, None, event.text))
    return "".join(normal), items
