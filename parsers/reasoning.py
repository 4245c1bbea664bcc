"""Reasoning: split the model's output into reasoning text and normal text.

``ReasoningDetector`` is a format declaration (start/end markers, whether output starts inside
reasoning when nothing says otherwise). ``ReasoningParser`` is the SGLang-compatible surface:

    parser = ReasoningParser("qwen3")
    reasoning, normal = parser.parse_stream_chunk(chunk)   # per chunk
    reasoning, normal = parser.finish()                     # at end of stream
    reasoning, normal = ReasoningParser("qwen3").parse_non_stream(text)

Start state (DESIGN §5): ``force_reasoning`` (as in SGLang's API) decides when given; else, when
the rendered prompt is known (``prompt=``), its tail decides — a prompt that ends inside an open
reasoning block (``…<think>\\n``) starts inside reasoning, one that closed it
(``<think>\\n\\n</think>\\n\\n``) starts outside; otherwise the detector's default applies, which
is SGLang's for the same name (``qwen3``: outside, ``deepseek-r1``: inside …).

Without a prompt and without ``force_reasoning`` the start is only a default: for formats whose
templates open the block in the generation prompt for some requests (``prompt_may_open``: Qwen3
and the other ``<think>`` families, MiniMax-M3, Cohere), an output that closes a block it never
opened (``…section</think>rest``) began inside it — the text before the end marker is reasoning,
as SGLang reads it in thinking mode. Until the output shows which it is (an end marker: reasoning;
a start marker at its beginning: reasoning; a tool-call start, the answer markup or the end of the
output: content) its text is held back, so a library user who knows the prompt should pass it (or
``force_reasoning``) to stream from the first token.

When the prompt itself opened the block (its tail is a start marker), a start marker the output
begins with is text of the thought, kept (Qwen 3.5 sometimes writes ``<think>`` again); without
such a prompt a start marker at the beginning opens the block. Reasoning text is trimmed of the
whitespace next to its markers; the whitespace between the end marker and the answer is not
content.

A tool call written inside an open reasoning block is text of the thought when the block's end
marker follows it — the model was thinking about the call (llama.cpp's rule) — and ends the block
when the output ends without that marker (models that never close the block before calling:
Qwen 3.5); so from a tool-call start marker inside a block the text is held until the end marker
or the end of the output decides which (the calls of a block left open reach the tool-call parser
only at the end of the output). Formats that declare calls inside the thought keep them calls: a
tool format with ``calls_in_thought`` (Arcee Trinity: the call start ends the block at once),
``answer_calls`` (Gemma 4), or ``passthrough`` blocks (Kimi K2 Thinking's call sections, Apertus):
such a block passes on as normal text and the reasoning resumes after it.

With ``reopen`` a start marker later
in the answer opens another reasoning block (and a stray end marker there is dropped); inside an
open block a start marker then repeats the opener and is markup, and the whitespace after a block
opened in the middle of the answer is the answer's. Elsewhere a start marker inside an open block
is text of the thought (a thought may talk about its own tags), and so is an end marker later on
the same line (``the tags are <think> and </think>``). The
answer's markup (``content_markup``) is dropped with the whitespace next to it, and an end-of-turn
token that is the last text of the output (``end_tokens``) is never content.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable
from typing import Any, ClassVar

from parsers.core.cursor import Cursor
from parsers.core.driver import Driver, Out, Program
from parsers.core.markers import MarkerSet
from parsers.events import Content, Event, Reasoning
from parsers.registry import reasoning_detector_class
from parsers.shapes.harmony import (
    CHANNEL,
    GENERATION_PROMPT,
    HARMONY,
    MESSAGE,
    START,
    Dialect,
    Start,
    harmony_program,
    parse_header,
    start_from_prompt,
)

#: how far a literal start marker inside a thought looks for an end marker on the same line
LINE_LIMIT = 512


class ReasoningDetector:
    """A reasoning format. Most subclasses only set the class attributes."""

    start: ClassVar[tuple[str, ...]] = ("<think>",)
    #: marker(s) that close the block; the first is the canonical one
    end: ClassVar[str | tuple[str, ...]] = "</think>"
    #: markers wrapping the answer after reasoning (e.g. ``<response>``…``</response>``); dropped from content
    content_markup: ClassVar[tuple[str, ...]] = ()
    force_reasoning: ClassVar[bool] = False  # output starts inside reasoning unless the prompt says otherwise
    #: the model's templates open the block in the generation prompt for some requests, so without
    #: a prompt an end marker the output never opened ends reasoning (see the module docstring)
    prompt_may_open: ClassVar[bool] = False
    #: a tool-call start marker inside an open block ends it, unless the block's end marker follows
    #: (most models: see the module docstring); formats whose block is delimited by control tokens
    #: keep such text as reasoning whatever follows
    tool_calls_end_reasoning: ClassVar[bool] = True
    #: ``(open, close)`` blocks inside reasoning that are normal text (tool calls written while
    #: reasoning): passed on as written, and the reasoning resumes after ``close`` (an empty
    #: ``close``: the marker alone is passed on — markup of the tool format, like a stray section end)
    passthrough: ClassVar[tuple[tuple[str, str], ...]] = ()
    #: a start marker anywhere in the answer opens another reasoning block (not only at the start);
    #: a stray end marker there is markup
    reopen: ClassVar[bool] = False
    #: end-of-turn tokens the model's templates close a turn with: never content when they are the
    #: last text of the output (``parsers.core.trailing``)
    end_tokens: ClassVar[tuple[str, ...]] = ()
    #: with ``reopen``: tool calls in the answer, passed on as written and not searched for
    #: reasoning markers — ``(opener, closers, quote)``: a closer between two ``quote`` markers (inside
    #: a string argument) does not end the call
    answer_calls: ClassVar[tuple[tuple[str, tuple[str, ...], str], ...]] = ()

    #: per response (set by ``ReasoningParser``): the tool format writes its calls inside the
    #: thought (``ToolFormat.calls_in_thought``), so a call start ends an open block at once
    calls_in_thought: bool = False
    #: per response (set by ``ReasoningParser``): the rendered prompt itself opened the block, so a
    #: start marker at the very beginning of the output is a literal the model wrote in its thought
    opened_by_prompt: bool = False

    @classmethod
    def ends(cls) -> tuple[str, ...]:
        return (cls.end,) if isinstance(cls.end, str) else tuple(cls.end)

    @classmethod
    def markers(cls) -> tuple[str, ...]:
        """Every marker string of the format (for leak checks and backend token preservation);
        a ``passthrough`` block's markers belong to the tool-call format."""
        return (*cls.start, *cls.ends(), *cls.content_markup)

    def continuation(self, inside: bool, reasoning: str, content: str, answer: bool) -> str:
        """The text that continues a prompt with an assistant message the model is to go on from
        (a prefill), after a prompt that leaves the output ``inside`` the reasoning block or not:
        the message's thought, opened unless the prompt opened it, and — with ``answer`` (the
        message's answer has begun) — the thought closed and the answer's text after it. Without
        ``answer`` the thought stays open for the model to go on with (nothing when there is none).
        The markers are the format's own; the message's texts are placed between them as written."""
        opener = "" if inside else self.start[0]
        if not answer:
            return opener + reasoning if reasoning else ""
        if reasoning:
            return opener + reasoning + self.ends()[0] + content
        return self.ends()[0] + content if inside else content

    def initial_state(self, prompt: str | None) -> bool | None:
        """Inside reasoning (True), outside (False) or unknown (None), judged from the prompt's tail."""
        if not prompt:
            return None
        end = len(prompt)  # the prompt without trailing whitespace, found without copying it
        while end and prompt[end - 1].isspace():
            end -= 1
        if any(prompt.endswith(s.rstrip(), 0, end) for s in self.start):
            return True
        if any(prompt.endswith(e.rstrip(), 0, end) for e in (*self.ends(), *self.content_markup)):
            return False
        return None

    def make_program(self, in_reasoning: bool | None, stop_markers: Iterable[str] = ()) -> Program:  # noqa: C901 — the reasoning grammar as one generator: splitting it would scatter its states across functions
        """The program for one response: optional start marker at the very beginning, reasoning up to an end marker
        (or a stop marker, which passes through as normal text), then normal text (the content
        markup is dropped by the content channel; with ``reopen``, further reasoning blocks).
        ``in_reasoning=None``: the start is unknown — the text is held until an end marker shows
        it was reasoning, or a stop marker, the content markup or the end of the output shows it
        was not."""
        starts = tuple(self.start)
        ends = self.ends()
        # an answer wrapper (content markup) or a tool-call start also ends the reasoning block
        stop_markers = tuple(stop_markers)
        stops = stop_markers if self.tool_calls_end_reasoning else ()
        passing = dict(self.passthrough)
        # with ``reopen`` the start markers are control tokens: one inside an open block repeats
        # the opener (after a call written while thinking) and is markup, not text of the thought
        repeated = frozenset(starts) if self.reopen else frozenset()
        # otherwise a start marker inside an open block is text of the thought (it talks about its
        # own tags), and so is an end marker later on the same line: ``the tags are <think> and
        # </think>`` does not end the block
        literal = frozenset() if self.reopen else frozenset(starts)
        # a call start inside the thought is held until the block's end shows it was thought
        # about (or the output's end that it was a call) — unless the formats declare calls there
        declared = {*passing, *(opener for opener, _, _ in self.answer_calls)}
        calls_inside = frozenset() if self.calls_in_thought else frozenset(m for m in stops if m not in declared)
        end_set = MarkerSet(ends)
        closing = MarkerSet((*ends, *stops, *self.content_markup, *passing, *starts))
        same_line = MarkerSet(("\n", *ends, *stops, *self.content_markup))
        undecided = MarkerSet((*ends, *stop_markers, *self.content_markup, *literal))
        calls = {opener: (closers, quote) for opener, closers, quote in self.answer_calls} if self.reopen else {}
        reopening = MarkerSet((*starts, *ends, *calls)) if self.reopen else None

        pass_ends = {opener: MarkerSet((closer,)) for opener, closer in passing.items() if closer}
        # a start marker the output begins with, after a prompt that already opened the block, is
        # text of the thought (where start markers are not control tokens that repeat the opener)
        opened = self.opened_by_prompt and not self.reopen

        def call(cur: Cursor, out: Out, opener: str) -> Generator[None, None, bool]:
            """A tool call in the answer, after its ``opener`` (written): passed on as written up to
            and including its closer; ``False`` when the output ended first."""
            closers, quote = calls[opener]
            inside = MarkerSet((*closers, quote) if quote else closers)
            while True:
                marker = yield from cur.until(inside, out.content.write)
                if marker is None:
                    return False
                out.content.write(marker)
                if marker in closers:
                    return True
                marker = yield from cur.until(MarkerSet((quote,)), out.content.write)  # the string, to its end
                if marker is None:
                    return False
                out.content.write(marker)

        def literal_line(cur: Cursor, write: Callable[[str], None], marker: str) -> Generator[None, None, None]:
            """A start marker inside a thought, and the rest of its line: text, up to and with an
            end marker on that line (a stop marker or the answer's markup is left for the caller)."""
            write(marker)
            text, term = yield from cur.read_until(same_line, limit=LINE_LIMIT)
            if term is not None and term != "\n" and term not in ends:
                cur.unread(len(term))
                term = None
            write(text + (term or ""))

        def block(cur: Cursor, out: Out, answered: bool = False) -> Generator[None, None, bool]:
            """Reasoning up to what ends it (consumed); ``False`` when the output ended first.
            ``answered``: the block opened in the middle of the answer, whose text goes on after
            it with the whitespace the model put there."""
            while True:
                marker = yield from cur.until(closing, out.reasoning.write)
                if marker is None:  # cut off inside reasoning: its text stays as written
                    return False
                if marker in repeated:
                    out.reasoning.strip_next()
                    continue
                if marker in literal:
                    yield from literal_line(cur, out.reasoning.write, marker)
                    continue
                if marker in calls_inside:  # a call written inside the thought (see the module docstring)
                    held = [marker]
                    end = yield from cur.until(end_set, held.append)
                    if end is None:  # the block never closed: the call ends it, and is a call
                        out.reasoning.drop_held()
                        out.content.write("".join(held))
                        return False
                    out.reasoning.write("".join(held))  # the thought went on to its end: it was thought about
                    marker = end
                    break
                if marker not in passing:
                    break
                out.content.write(marker)
                if not passing[marker]:  # a lone marker of the tool format (a stray section end)
                    continue
                closer = yield from cur.until(pass_ends[marker], out.content.write)
                if closer is None:
                    return False
                out.content.write(closer)
            out.reasoning.drop_held()
            if marker in ends:
                if not answered:
                    out.content.strip_next()
            else:  # a tool-call start passes on; the content channel drops the answer's markup
                out.content.write(marker)
                if marker in calls:  # a call that ended the block: its text is not searched either
                    return (yield from call(cur, out, marker))
            return True

        def program(cur: Cursor, out: Out) -> Generator[None, None, None]:
            lead: list[str] = []
            yield from cur.skip_ws(lead.append)
            first = yield from cur.match((*starts, *ends))
            if first is not None and first not in starts:
                # the block closed as the output began (empty, or closed before it: a template
                # that prefixes answers with a bare end marker): the marker is markup
                out.content.strip_next()
            elif first is not None or in_reasoning:
                out.reasoning.write(first if first is not None and in_reasoning and opened else "")
                if not (yield from block(cur, out)):
                    return
            elif in_reasoning is None:
                held: list[str] = ["".join(lead)]
                while (marker := (yield from cur.until(undecided, held.append))) in literal:
                    assert marker is not None
                    yield from literal_line(cur, held.append, marker)
                if marker in ends:  # a block the output never opened: it began inside it
                    out.reasoning.write("".join(held))
                    out.reasoning.drop_held()
                    out.content.strip_next()
                else:
                    out.content.write("".join(held))
                    if marker is not None:
                        out.content.write(marker)
                        if marker in calls and not (yield from call(cur, out, marker)):
                            return
            else:
                out.content.write("".join(lead))
            if reopening is None:
                yield from cur.rest(out.content.write)
                return
            answered = False  # answer text came before the block: what follows it continues that text

            def answer(text: str) -> None:
                nonlocal answered
                answered = answered or not text.isspace()
                out.content.write(text)

            while (marker := (yield from cur.until(reopening, answer))) is not None:
                if marker in starts and not (yield from block(cur, out, answered)):
                    return
                if marker in calls:
                    out.content.write(marker)
                    if not (yield from call(cur, out, marker)):
                        return

        return program


class HarmonyReasoning(ReasoningDetector):
    """A Harmony-like envelope (``parsers.shapes.harmony``) as a reasoning parser alone: reasoning
    messages are reasoning, the rest content, a call message's body content as written. A subclass
    sets ``dialect``, and ``start`` / ``end`` (the reasoning message's header and terminator, for
    template analysis). The start state comes from the prompt's tail: after ``<|start|>assistant``
    the output begins with a header; a prompt that ends inside a reasoning body starts inside it
    (as does ``force_reasoning``). Tool-call stop markers play no part: messages end themselves."""

    dialect: ClassVar[Dialect] = HARMONY
    #: the header of an answer message after the role (a prefill's answer is written in one)
    answer_header: ClassVar[str] = CHANNEL + "final"
    _start: Start = GENERATION_PROMPT

    @classmethod
    def markers(cls) -> tuple[str, ...]:
        return cls.dialect.markers

    def initial_state(self, prompt: str | None) -> bool | None:
        """True when the prompt leaves the output inside a reasoning body; None without a prompt."""
        self._start = start_from_prompt(prompt, self.dialect)
        if not prompt:
            return None
        start = self._start
        return start.in_body and self.dialect.is_reasoning(parse_header(start.prefix, start.opened, self.dialect))

    def continuation(self, inside: bool, reasoning: str, content: str, answer: bool) -> str:
        """A prefill in the envelope (see ``ReasoningDetector.continuation``): the thought is a
        reasoning message, the answer a ``final`` one after it."""
        final = self.answer_header + MESSAGE
        opener = "" if inside else self.start[0]
        if not answer:
            return opener + reasoning if reasoning else ""
        if reasoning or inside:
            return opener + reasoning + self.ends()[0] + START + "assistant" + final + content
        return final + content

    def make_program(self, in_reasoning: bool | None, stop_markers: Iterable[str] = ()) -> Program:
        start = self._start
        if in_reasoning and not start.in_body:
            start = Start(prefix=self.dialect.reasoning_header, in_body=True)
        elif not in_reasoning and start.in_body:
            start = GENERATION_PROMPT
        return harmony_program(self.dialect, start, calls=False)


class ReasoningParser:
    """Streaming reasoning parser (SGLang-compatible surface; see the module docstring)."""

    def __init__(
        self,
        model_type: str | type,
        stream_reasoning: bool = True,
        force_reasoning: bool | None = None,
        *,
        prompt: str | None = None,
        stop_markers: Iterable[str] = (),
        detector: ReasoningDetector | None = None,
        end_tokens: Iterable[str] = (),
        calls_in_thought: bool = False,
    ) -> None:
        self.detector = detector or reasoning_detector_class(model_type)()
        self.detector.calls_in_thought = calls_in_thought
        self.model_type = model_type
        self.stream_reasoning = stream_reasoning
        self.force_reasoning = force_reasoning
        self.prompt = prompt
        self._stop_markers = tuple(stop_markers)
        #: inside (True), outside (False), or None: not known yet (see the module docstring)
        self.in_reasoning_at_start = self._start_state(force_reasoning, prompt)
        self.detector.opened_by_prompt = bool(self.in_reasoning_at_start and prompt
                                              and self.detector.initial_state(prompt))
        detector = self.detector
        #: end-of-turn tokens dropped where they close the output: the format's own, and those of
        #: the tool format chained after it (``end_tokens``: the output may end inside reasoning)
        self._end_tokens = tuple(dict.fromkeys((*detector.end_tokens, *end_tokens)))
        self._program = Driver(detector.make_program(self.in_reasoning_at_start, self._stop_markers),
                               content_markup=detector.content_markup, end_tokens=self._end_tokens)
        self._held: list[str] = []

    def _start_state(self, force_reasoning: bool | None, prompt: str | None) -> bool | None:
        if force_reasoning is not None:
            return force_reasoning
        state = self.detector.initial_state(prompt)
        if state is not None:
            return state
        detector = self.detector
        if not prompt and not detector.force_reasoning and detector.prompt_may_open:
            return None
        return detector.force_reasoning

    # ------------------------------------------------------------------ event surface

    def feed(self, text: str) -> list[Event]:
        return self._hold(self._program.feed(text), final=False)

    def end(self, truncated: bool = False) -> list[Event]:
        return self._hold(self._program.finish(truncated), final=True)

    def _hold(self, events: list[Event], final: bool) -> list[Event]:
        """With ``stream_reasoning=False`` reasoning is delivered whole, when its block ends."""
        if self.stream_reasoning:
            return events
        out: list[Event] = []
        for event in events:
            if isinstance(event, Reasoning):
                self._held.append(event.text)
                continue
            if self._held:
                out.append(Reasoning("".join(self._held)))
                self._held = []
            out.append(event)
        if final and self._held:
            out.append(Reasoning("".join(self._held)))
            self._held = []
        return out

    # ------------------------------------------------------------------ SGLang-compatible surface

    def parse_stream_chunk(self, chunk_text: str) -> tuple[str, str]:
        """``(reasoning_text, normal_text)`` released by this chunk."""
        return _split(self.feed(chunk_text))

    def finish(self, truncated: bool = False) -> tuple[str, str]:
        """``(reasoning_text, normal_text)`` still held at end of stream."""
        return _split(self.end(truncated))

    def parse_stream_end(self) -> tuple[str, str]:
        """SGLang's name for ``finish()``."""
        return self.finish()

    def parse_non_stream(self, full_text: str) -> tuple[str, str]:
        """Parse a whole output with a fresh parser in the same configuration."""
        fresh = ReasoningParser(
            self.model_type, self.stream_reasoning, self.force_reasoning, prompt=self.prompt,
            stop_markers=self._stop_markers, detector=self.detector, end_tokens=self._end_tokens,
            calls_in_thought=self.detector.calls_in_thought,
        )
        first = fresh.feed(full_text)
        return _split(first + fresh.end())


def _split(events: list[Any]) -> tuple[str, str]:
    reasoning = "".join(e.text for e in events if isinstance(e, Reasoning))
    normal = "".join(e.text for e in events if isinstance(e, Content))
    return reasoning, normal
