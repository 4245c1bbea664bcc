"""Typed content blocks (Inkling): the output is a sequence of messages, each a header, a token
naming what the message holds, the payload and an end token::

    <|message_model|><|content_thinking|>Need the weather.<|end_message|>
    <|message_model|>get_weather<|content_invoke_tool_json|>{"name": "get_weather", "args": {"city": "Paris"}}<|end_message|>
    <|message_model|><|content_text|>It is sunny.<|end_message|><|content_model_end_sampling|>

(the newlines are for reading only). What each message becomes:

* a thinking block → reasoning; a text block (and any other content kind) → content;
* a JSON tool invocation → a tool call: the payload names the tool and holds its arguments, which
  stream through as written (the header repeats the name; the payload's is used); a payload that
  is not a call object is passed through as content. A raw-text invocation (no name, no
  arguments on the wire) is content, as the model's reference parser surfaces it;
* a message of another author (``<|message_user|>`` …: a hallucinated turn) → dropped;
* text outside any message (the model skipped the header) → content.

Control tokens are text here, so: inside a block, ``<|message_model|>`` is text the model wrote (a
real header only follows an end token); a content-kind token switches the block's kind; an end
token ends it; other control tokens are dropped. Marker strings inside a JSON payload's strings
are never markers. A header longer than ``HEADER_LIMIT`` is text (content); a header cut off by the
end of the output is dropped.

``Blocks`` declares the tokens; ``INKLING`` is Inkling's set (SGLang 0.5.23's ``inkling`` parsers).
"""

from __future__ import annotations

from collections.abc import Generator, Mapping
from dataclasses import dataclass, field
from functools import cached_property

from parsers.core.cursor import Cursor, discard
from parsers.core.driver import Out, Program
from parsers.core.markers import MarkerSet
from parsers.format import CallContext, ToolFormat
from parsers.shapes.jsoncall import JsonCallShape, call_template, json_call
from parsers.wire import WireFormat, lit

HEADER_LIMIT = 512

# what a block's payload becomes
REASONING, CONTENT, CALL, DROP = "reasoning", "content", "call", "drop"
HEADER = "header"  # inside a message header, before its content-kind token


@dataclass(frozen=True)
class Blocks:
    """The tokens of one typed-block envelope (data only)."""

    own_message: str  # opens a message of the model's
    other_messages: tuple[str, ...]  # open messages of other authors (dropped)
    kinds: tuple[tuple[str, str], ...]  # content-kind token → REASONING | CONTENT | CALL
    ends: tuple[str, ...]  # tokens that end a block
    other: tuple[str, ...] = ()  # further control tokens (dropped wherever they appear)
    call: JsonCallShape = field(default_factory=JsonCallShape)  # a call block's JSON payload
    call_kind: str = ""  # the content-kind token of a call block (the wire writes it)

    @cached_property
    def kind_of(self) -> Mapping[str, str]:
        return dict(self.kinds)

    @property
    def markers(self) -> tuple[str, ...]:
        return (self.own_message, *self.other_messages, *(t for t, _ in self.kinds), *self.ends, *self.other)

    @cached_property
    def marker_set(self) -> MarkerSet:
        return MarkerSet(self.markers)


def start_kind(blocks: Blocks, prompt: str | None) -> str | None:
    """Where the output begins, from the prompt's tail: inside a block the prompt opened
    (``<|message_model|><|content_text|>``), inside a header, or (``None``) at a message boundary."""
    if not prompt:
        return None
    for token, kind in blocks.kinds:
        if prompt.endswith(blocks.own_message + token):
            return kind if kind != CALL else None
    return HEADER if prompt.endswith(blocks.own_message) else None


def blocks_messages(cur: Cursor, out: Out, blocks: Blocks, start: str | None = None,
                    calls: bool = True) -> Generator[None, None, None]:
    """The program body (see the module docstring). With ``calls=False`` (reasoning parser only)
    a call block's payload is content, as written."""
    every = blocks.marker_set
    kind = start
    while True:
        if kind is None:  # between messages: text here had no header
            marker = yield from cur.until(every, out.content.write)
            if marker is None:
                return
            kind = _next_kind(blocks, marker, None)
        elif kind == HEADER:
            text, marker = yield from cur.read_until(every, HEADER_LIMIT)
            if marker is None:
                if len(text) > HEADER_LIMIT:  # no header: text (left unread) is content
                    kind = CONTENT
                    continue
                yield from cur.rest(discard)  # a header cut off by the end of the output
                return
            kind = _next_kind(blocks, marker, HEADER)
        elif kind == CALL:
            kind = None
            if calls:
                out.calls.begin()  # a payload that is no call is content, without its framing
                ok = yield from json_call(cur, out, blocks.call, every)
                ok = ok and (yield from _closing(cur, blocks.ends))
                out.calls.end(ok)
                continue
            yield from cur.skip_ws()
            if (yield from cur.peek()) == "{":  # markers inside its strings are text
                yield from cur.json_value(out.content.write, every)
            kind = CONTENT
        else:
            channel = out.reasoning if kind == REASONING else out.content
            write = discard if kind == DROP else channel.write
            marker = yield from cur.until(every, write)
            if marker is None:
                return
            if marker == blocks.own_message:  # inside a block it is text the model wrote
                write(marker)
                continue
            if kind == REASONING:
                out.reasoning.drop_held()
            kind = _next_kind(blocks, marker, kind)


def _next_kind(blocks: Blocks, marker: str, kind: str | None) -> str | None:
    """The state after a control token read between messages (``None``), in a header or in a block."""
    if marker == blocks.own_message:
        return HEADER
    if marker in blocks.other_messages:
        return DROP
    if marker in blocks.ends:
        return None
    found = blocks.kind_of.get(marker)
    if found is not None:
        return DROP if kind == DROP else found  # another author's message stays dropped to its end
    return kind  # another control token: dropped


def _closing(cur: Cursor, ends: tuple[str, ...]) -> Generator[None, None, bool]:
    """An end token after a call's payload (whitespace allowed); a missing one is accepted only
    where the model itself ended the output."""
    yield from cur.skip_ws()
    if (yield from cur.match(ends)) is not None:
        return True
    return cur.eof and cur.available == 0 and not cur.truncated


def blocks_program(blocks: Blocks, start: str | None = None, calls: bool = True) -> Program:
    """``blocks_messages`` bound to its settings, as a ``Program``."""

    def program(cur: Cursor, out: Out) -> Generator[None, None, None]:
        yield from blocks_messages(cur, out, blocks, start, calls)

    return program


def blocks_wire(blocks: Blocks) -> WireFormat:
    """A call as a message of the model's: header with the name, the call kind, the JSON payload."""
    return WireFormat(lit(blocks.own_message) + "$name" + lit(blocks.call_kind) + call_template(blocks.call)
                      + lit(blocks.ends[0]))


def typed_blocks(blocks: Blocks) -> ToolFormat:
    """A typed-block envelope as a tool-call format: it carries reasoning and content too
    (``handles_reasoning``); the prompt's tail says whether the output begins inside a block."""

    def read(ctx: CallContext, cur: Cursor, out: Out) -> Generator[None, None, None]:
        # a generator: the prompt is read when parsing begins, i.e. after the detector's ``prepare``
        yield from blocks_messages(cur, out, blocks, start_kind(blocks, ctx.prompt), calls=True)

    return ToolFormat(read=read, start_markers=(blocks.own_message,), markers=blocks.markers, wire=blocks_wire(blocks),
                      trim_around_calls=False, handles_reasoning=True, sniff=lambda text: blocks.call_kind in text)


#: Inkling's control tokens (SGLang 0.5.23 ``inkling_tokenizer``)
INKLING = Blocks(
    own_message="<|message_model|>",
    other_messages=("<|message_user|>", "<|message_system|>", "<|message_tool|>"),
    kinds=(("<|content_thinking|>", REASONING), ("<|content_text|>", CONTENT),
           ("<|content_invoke_tool_json|>", CALL), ("<|content_invoke_tool_text|>", CONTENT),
           ("<|content_xml|>", CONTENT), ("<|content_tool_error|>", CONTENT), ("<|content_image|>", CONTENT),
           ("<|content_audio_input|>", CONTENT)),
    ends=("<|end_message|>", "<|content_model_end_sampling|>", "<|endoftext|>"),
    other=("<|audio_end|>", "<|content_invoke_tool|>", "<|model_trigger_generation|>"),
    call=JsonCallShape(name_keys=("name",), args_keys=("args",), nest_keys=()),
    call_kind="<|content_invoke_tool_json|>",
)
