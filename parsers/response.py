"""One response through both parsers: reasoning first, then tool calls on the normal text."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from parsers.events import Content, Event
from parsers.function_call import FunctionCallParser
from parsers.prefill import Continuation
from parsers.reasoning import ReasoningParser
from parsers.registry import means_none


class ResponseParser:
    """Chains an optional ``ReasoningParser`` and an optional ``FunctionCallParser``; events
    come out in the order the model wrote them."""

    def __init__(self, reasoning: ReasoningParser | None = None, tools: FunctionCallParser | None = None) -> None:
        self.reasoning = reasoning
        self.tools = tools
        self._continuation: Continuation | None = None

    @property
    def failed(self) -> bool:
        """A detector program raised (a bug, contained: its rest went through as content)."""
        return bool((self.reasoning and self.reasoning._program.failed) or (self.tools and self.tools._program.failed))

    def feed(self, text: str) -> list[Event]:
        events = self._feed(text)
        return events if self._continuation is None else self._continuation(events)

    def end(self, truncated: bool = False) -> list[Event]:
        events = self._end(truncated)
        return events if self._continuation is None else self._continuation(events)

    def prime(self, text: str) -> None:
        """Read ``text`` — an assistant message the client prefilled, which the output continues —
        without returning it: the chain starts in the state it leaves, and ``feed`` / ``end``
        return only what comes after it (``parsers.prefill``). Call once, before ``feed``."""
        assert self._continuation is None, "prime() comes once, before feed()"
        primed = self._feed(text)
        for parser in (self.reasoning, self.tools):
            if parser is not None:
                parser._program.forget_held()
        if self.reasoning is not None:
            self.reasoning._held = []
        self._continuation = Continuation(primed)

    def _feed(self, text: str) -> list[Event]:
        if self.reasoning is None:
            if self.tools is not None:  # the tool parser's events are already this chunk's own list
                return self.tools.feed(text)
            return [Content(text)] if text else []
        return self._through_tools(self.reasoning.feed(text), final=False)

    def _end(self, truncated: bool) -> list[Event]:
        events = self.reasoning.end(truncated) if self.reasoning is not None else []
        return self._through_tools(events, final=True, truncated=truncated)

    def _through_tools(self, events: list[Event], final: bool, truncated: bool = False) -> list[Event]:
        if self.tools is None:
            return [e for e in events if not (isinstance(e, Content) and not e.text)]
        out: list[Event] = []
        for event in events:
            if isinstance(event, Content):
                out.extend(self.tools.feed(event.text))
            else:
                out.append(event)
        if final:
            out.extend(self.tools.end(truncated))
        return out


class OpeningSwitch(ResponseParser):
    """Parses with ``expected`` when the output opens (after whitespace) with one of ``openers``,
    else with the chain ``fallback()`` builds (``fell_back`` is then set). For constrained
    decoding a backend may not have applied: the JSON asked for, or the model's own markup. Only
    leading whitespace is held back."""

    def __init__(self, openers: str, expected: ResponseParser, fallback: Callable[[], ResponseParser]) -> None:
        super().__init__(expected.reasoning, expected.tools)
        self._openers = openers
        self._expected = expected
        self._fallback = fallback
        self._chosen: ResponseParser | None = None
        self._held = ""
        self.fell_back = False

    def _choose(self, parser: ResponseParser) -> list[Event]:
        self._chosen = parser
        self.reasoning, self.tools = parser.reasoning, parser.tools
        held, self._held = self._held, ""
        return parser.feed(held) if held else []

    def _feed(self, text: str) -> list[Event]:
        if self._chosen is not None:
            return self._chosen.feed(text)
        self._held += text
        opening = self._held.lstrip()
        if not opening:
            return []
        if opening[0] in self._openers:
            return self._choose(self._expected)
        self.fell_back = True
        return self._choose(self._fallback())

    def _end(self, truncated: bool) -> list[Event]:
        events = self._choose(self._expected) if self._chosen is None else []
        assert self._chosen is not None
        return events + self._chosen.end(truncated)


def build_response_parser(tools: Iterable[Any] | None, tool_parser: str | type | None,
                          reasoning_parser: str | type | None, prompt: str | None = None,
                          in_reasoning: bool | None = None, max_calls: int | None = None, *,
                          read_calls: bool = True, prefill: str = "") -> ResponseParser:
    """The parser chain for one response.

    Parsers are registry names or detector classes (``none``: no parser). ``tool_parser`` is used when given (``tools`` may be empty: calls to unknown tools are still
    parsed); its detector sees the rendered prompt first (``prepare``). A tool format that also
    carries reasoning (``handles_reasoning``, e.g. Harmony) gets the raw output itself, and the
    reasoning parser is not chained before it.
    Otherwise the reasoning parser ends reasoning at any of the tool format's start markers, and
    drops the tool format's end-of-turn tokens where they close the output (it may end inside
    reasoning).
    ``in_reasoning`` fixes the reasoning parser's start state (else the prompt's tail decides);
    calls beyond ``max_calls`` are content.

    ``read_calls=False`` (a request that offers no tools): the tool format still owns its markup
    around the answer — its response envelope (``content_markup``), its end-of-turn tokens and,
    for a format that carries reasoning, its whole message envelope — but no call is read: a
    call's text is content, and call start markers do not end reasoning.

    ``prefill``: the text of an assistant message the client ended its request with, which the
    model's output continues (``prompt`` is the rendered prompt up to where that message begins).
    The chain starts in the state that text leaves it in and returns only what comes after it
    (``ResponseParser.prime``).
    """
    if means_none(tool_parser):
        tool_parser = None
    if means_none(reasoning_parser):
        reasoning_parser = None
    calls = None
    if tool_parser:
        calls = FunctionCallParser(tools, tool_parser, max_calls=max_calls if read_calls else 0)
        calls.detector.prepare(prompt)
    chain: ResponseParser | None = None
    if calls is not None and calls.detector.handles_reasoning:
        chain = ResponseParser(None, calls)
    else:
        reasoning = None
        if reasoning_parser:
            stops = calls.detector.start_markers if calls is not None and read_calls else ()
            reasoning = ReasoningParser(reasoning_parser, force_reasoning=in_reasoning, prompt=prompt,
                                        stop_markers=stops, end_tokens=calls.detector.end_tokens if calls else (),
                                        calls_in_thought=bool(calls and calls.detector.calls_in_thought))
        chain = ResponseParser(reasoning, calls)
    if prefill:
        chain.prime(prefill)
    return chain
