"""Harmony (gpt-oss) and Harmony-like envelopes: the output is a sequence of messages.

After the generation prompt ``<|start|>assistant`` the model writes messages of the form
``{header}<|message|>{body}{terminator}``; every message after the first opens with ``<|start|>``::

    <|channel|>analysis<|message|>Need the weather.<|end|>
    <|start|>assistant<|channel|>commentary<|message|>Checking…<|end|>
    <|start|>assistant to=functions.get_weather<|channel|>commentary <|constrain|>json<|message|>{"city": "Paris"}<|call|>
    <|start|>assistant<|channel|>final<|message|>It is sunny.<|return|>

(the newlines are for reading only). The header holds the role (``assistant``; already in the
prompt for the first message), the channel (``<|channel|>analysis|commentary|final``), an optional
recipient ``to=…`` (in the role part or after the channel), and an optional content type
(``<|constrain|>json``, `` <|constrain|>json`` or a bare `` json``). What each message becomes:

* ``analysis`` → reasoning; several reasoning messages are joined with ``"\\n"``;
* ``final``, a channel-less message, an unknown channel, and ``commentary`` without a recipient
  (a user-visible *preamble*) → content; several content messages are joined with ``"\\n\\n"``;
* recipient ``functions.NAME`` (or a bare offered tool name), any channel → a tool call whose JSON
  arguments stream through as written. ``<|call|>`` usually never reaches us (it is a stop token),
  so the end of stream closes a call unless the output was cut at the token limit. A call body
  that is not a JSON object is passed through as content;
* any other recipient (built-in tools: ``python``, ``browser.search``, ``container.exec`` …) →
  dropped, as vLLM and llama.cpp do: the client offered no such function and we run none;
  ``to=assistant`` is not a recipient (it is how tool replies are addressed);
* a message whose role is not the assistant's (``user``, ``system``, ``tool``, ``functions.x`` …:
  a hallucinated turn) → dropped.

Text, not tokens: marker strings inside a JSON string are never markers. In a text body a
terminator (``<|end|>``, ``<|call|>``, ``<|return|>``) ends the message only when what follows it
is the start of another message (``<|start|>``, ``<|channel|>``, another terminator) or the end of
the output; otherwise it was written as text (``I must not write <|call|> myself``) and stays text.

Malformed output never raises: a header that runs into a terminator or ``<|start|>`` without
``<|message|>`` is dropped when it parses as a header and is content otherwise (``<|channel|>??<|end|>``
→ ``??``); a header cut by the end of the output is dropped when it has header structure and is
content when it is plain text (the model ignored the format); a "header" longer than
``HEADER_LIMIT`` characters is text: it is streamed as content, header markers removed, up to the
next message boundary (``<|start|>`` or a terminator followed by one).

A ``Dialect`` declares the variations. ``HARMONY`` is gpt-oss; ``OPENCHATML`` is the OpenChatML 2.2
envelope (QuixiAI/OpenChatML README.md): ``call_id=`` is the call id, ``commentary`` is hidden
(reasoning) unless ``intent=preamble``, ``<|literal|>…<|endliteral|>`` is opaque text, ``<<|start|>``
(a doubled ``<`` before any control token) is the literal token text. ``MUSE`` is Muse Glimmer's
recipient-only envelope: no channels, messages end with ``<|eom|>`` / ``<|eot|>``, the recipient
``self`` is reasoning, ``user`` and ``commentary`` are content, and any other recipient is a tool
whose body holds ATEM invokes (``CallBody``)::

    <|start|>assistant to=self<|message|>Need the weather.<|eom|>
    <|start|>assistant to=get_weather<|message|><atem:function_calls>
    <atem:invoke name="get_weather">
    <atem:parameter name="city">Paris</atem:parameter>
    </atem:invoke>
    </atem:function_calls><|eot|>

ATEM parameter values are typed by the tool's JSON schema; an invoke's name that is not an offered
tool but doubles its namespace (``get_weather.get_weather``) or ends in exactly one offered tool's
name is that tool. Text in a tool message outside the invokes is content.

``BEAM`` is Beam's envelope: Harmony's channels and terminators, but the recipient is the
function's bare name (``to=get_weather``) and a call's body is that function's parameters as XML
(``<rfl:parameter name="city">\nParis\n</rfl:parameter>``), typed by the tool's schema.

So a call message's body (``Dialect.call_body``) is one of three things: the JSON arguments of the
function the recipient names (gpt-oss, OpenChatML), that function's XML parameters (``XmlArgs``:
Beam), or XML invokes that name their own functions (``CallBody``: Muse). Every XML parameter is
read by the one parameter reader of ``parsers.shapes.xmlcall``.
"""

from __future__ import annotations

import re
from collections.abc import Generator, Mapping
from dataclasses import dataclass, field
from functools import cache

from parsers.core.cursor import Cursor, Write, discard
from parsers.core.driver import Out, Program
from parsers.core.markers import MarkerSet
from parsers.format import CallContext, ToolFormat
from parsers.shapes.xmlcall import XmlArgs, XmlCallShape, xml_call, xml_call_template, xml_params, xml_params_until
from parsers.tools import ToolSpec
from parsers.wire import JSON_ARGS, WireFormat, lit

START = "<|start|>"
END = "<|end|>"
MESSAGE = "<|message|>"
CHANNEL = "<|channel|>"
CONSTRAIN = "<|constrain|>"
CALL = "<|call|>"
RETURN = "<|return|>"
LITERAL = "<|literal|>"
END_LITERAL = "<|endliteral|>"
EOM = "<|eom|>"  # Muse: end of message (more follow)
EOT = "<|eot|>"  # Muse: end of turn

TERMINATORS = (END, CALL, RETURN)
#: a header is at most this long; longer "headers" are text
HEADER_LIMIT = 512
#: roles (or tool authors) whose messages are not the assistant's
OTHER_ROLES = frozenset({"system", "developer", "user", "tool", "python"})

_WS = " \t\r\n"
_SEGMENT = re.compile("(" + re.escape(CHANNEL) + "|" + re.escape(CONSTRAIN) + ")")
_ATTR = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=(.*)\Z", re.DOTALL)
_RECIPIENT = re.compile(r"\s*to=\S")


@dataclass(frozen=True)
class CallBody:
    """Calls written in a tool message's body as XML invokes inside a section (Muse's ATEM), each
    naming its function, rather than as the arguments of the function the recipient names."""

    section: tuple[str, str]  # ("<atem:function_calls>", "</atem:function_calls>")
    call_start: str  # '<atem:invoke name="' (the name follows)
    shape: XmlCallShape  # the rest of one invoke


@dataclass(frozen=True)
class Dialect:
    """What distinguishes one Harmony-like envelope from another (data only)."""

    channels: frozenset[str] = frozenset({"analysis", "commentary", "final"})
    #: what ends a message
    terminators: tuple[str, ...] = TERMINATORS
    #: markers inside headers (Harmony's channel and content type; none where headers are plain words)
    header_markers: tuple[str, ...] = (CHANNEL, CONSTRAIN)
    #: recipients that are not tools: reasoning (Muse's ``self``) and visible content (``user``)
    reasoning_recipients: frozenset[str] = frozenset()
    content_recipients: frozenset[str] = frozenset()
    #: what a recipient naming a function starts with (a bare offered tool name is one too);
    #: ``None``: every recipient but the ones above is a function's name (Beam's ``to=get_weather``)
    function_prefix: str | None = "functions."
    #: how a call message's body is written. ``None``: the JSON arguments of the function the
    #: recipient names; ``XmlArgs``: that function's parameters as XML (Beam); ``CallBody``: XML
    #: invokes naming their functions (Muse: any recipient but the ones above is a tool message)
    call_body: XmlArgs | CallBody | None = None
    #: how the wire writes a call message's header after the role (a template: ``$name``)
    call_header: str = lit(CHANNEL + "commentary to=functions.") + "$name" + lit(" " + CONSTRAIN + "json")
    #: text that shows an output holds a call (SGLang's ``has_tool_call``); ``None``: the invokes
    #: section's opener, or ``to=`` and the function prefix
    call_sniff: str | None = None
    #: the header of a reasoning message (a forced start inside reasoning opens one)
    reasoning_header: str = "assistant" + CHANNEL + "analysis"
    #: commentary without a recipient is hidden (reasoning) unless ``intent=preamble``
    hidden_commentary: bool = False
    #: ``(open, close)`` of an opaque literal block inside text bodies
    literal: tuple[str, str] | None = None
    #: ``<`` + a control token is that token's text (``<<|end|>`` → ``<|end|>``)
    escapes: bool = False
    #: header attribute carrying the tool-call id
    call_id_key: str | None = None

    @property
    def markers(self) -> tuple[str, ...]:
        base = (START, MESSAGE, *self.header_markers, *self.terminators)
        return tuple(dict.fromkeys(base + (self.literal or ()) + _body_markers(self.call_body)))

    @property
    def invokes(self) -> CallBody | None:
        """The invokes section of a tool message, where calls name their own functions."""
        return self.call_body if isinstance(self.call_body, CallBody) else None

    @property
    def params(self) -> XmlArgs | None:
        """The XML parameters that are a call message's body (the recipient names the function)."""
        return self.call_body if isinstance(self.call_body, XmlArgs) else None

    @property
    def followers(self) -> tuple[str, ...]:
        """What may follow a terminator that really ends a message."""
        return (START, *self.header_markers[:1], *self.terminators)

    def is_reasoning(self, header: Header) -> bool:
        """Whether a message with this header is reasoning."""
        if header.recipient is not None and header.recipient in self.reasoning_recipients:
            return True
        hidden = header.channel == "commentary" and self.hidden_commentary and header.attrs.get("intent") != "preamble"
        return header.recipient is None and (header.channel == "analysis" or hidden)


def _body_markers(body: XmlArgs | CallBody | None) -> tuple[str, ...]:
    """The markers of a call body's XML: a tag's name without its attributes (``<rfl:parameter``)."""
    if body is None:
        return ()
    if isinstance(body, XmlArgs):
        return (body.key_start.split(" ")[0], body.value_end)
    return (*body.section, body.call_start.split(" ")[0], body.shape.call_end, *_body_markers(body.shape.args))


HARMONY = Dialect()
OPENCHATML = Dialect(hidden_commentary=True, literal=(LITERAL, END_LITERAL), escapes=True, call_id_key="call_id")
#: Muse Glimmer (see the module docstring)
MUSE = Dialect(
    channels=frozenset(), terminators=(EOM, EOT), header_markers=(),
    reasoning_recipients=frozenset({"self"}), content_recipients=frozenset({"user", "commentary"}),
    call_body=CallBody(("<atem:function_calls>", "</atem:function_calls>"), '<atem:invoke name="',
                       XmlCallShape(name_end=('">',), call_end="</atem:invoke>",
                                    args=XmlArgs('<atem:parameter name="', '">', "</atem:parameter>",
                                                 value_breaks=("\n</atem:invoke>",)))),
    reasoning_header="assistant to=self", call_header=lit(" to=") + "$name",
)
#: Beam (see the module docstring): a value ends at its closing tag (one token starting with the
#: newline), or where the model opens the next parameter instead
BEAM_PARAM = '<rfl:parameter name="'
BEAM = Dialect(
    function_prefix=None,
    call_body=XmlArgs(BEAM_PARAM, '">', "</rfl:parameter>", trim_newline=True, value_breaks=(BEAM_PARAM,)),
    call_header=lit(" to=") + "$name" + lit(CHANNEL + "analysis " + CONSTRAIN + "xml"),
    call_sniff=CONSTRAIN + "xml" + MESSAGE,
)


@dataclass(frozen=True)
class _Sets:
    header: MarkerSet  # where a header ends
    body: MarkerSet  # what a text body reacts to
    garbled: MarkerSet  # body markers, <|start|> and header markers (dropped): text that is not a message
    stop: MarkerSet  # any marker outside a JSON string breaks the value
    escapes: frozenset[str]
    literal_end: MarkerSet | None
    invokes: MarkerSet | None  # in a CallBody section: a call, the section's end, or the message's end
    name_end: MarkerSet | None  # the end of an invoke's name


@cache
def _sets(dialect: Dialect) -> _Sets:
    escapes = frozenset("<" + m for m in dialect.markers) if dialect.escapes else frozenset()
    body = (*dialect.terminators, *escapes, *(dialect.literal or ()))
    calls = dialect.invokes
    return _Sets(
        header=MarkerSet((MESSAGE, START, *dialect.terminators)),
        body=MarkerSet(body),
        garbled=MarkerSet((*body, START, MESSAGE, *dialect.header_markers)),
        stop=MarkerSet(dialect.markers),
        escapes=escapes,
        literal_end=MarkerSet((dialect.literal[1],)) if dialect.literal else None,
        invokes=MarkerSet((calls.call_start, calls.section[1], START, *dialect.terminators)) if calls else None,
        name_end=MarkerSet(calls.shape.name_end) if calls else None,
    )


# ---------------------------------------------------------------------------------------- headers


@dataclass
class Header:
    """A parsed message header. ``garbage``: words that fit no header field (or an unknown channel)."""

    role: str | None = None
    channel: str | None = None
    recipient: str | None = None
    content_type: str | None = None
    attrs: dict[str, str] = field(default_factory=dict)
    garbage: bool = False


def parse_header(text: str, opened: bool, dialect: Dialect) -> Header:
    """Parse header text (``<|channel|>`` / ``<|constrain|>`` included, ``<|message|>`` not).
    ``opened``: the message began with ``<|start|>``, so its first word is the role."""
    header = Header()
    parts = _SEGMENT.split(text)
    words = parts[0].split()
    if opened and words and "=" not in words[0]:
        header.role = words.pop(0)
    for word in words:
        if not _attribute(header, word):
            header.garbage = True
    for marker, segment in zip(parts[1::2], parts[2::2], strict=False):  # a trailing marker has no segment
        words = segment.split()
        if marker == CHANNEL:
            if not words or "=" in words[0]:
                header.garbage = True
            else:
                header.channel = words.pop(0)
                if header.channel not in dialect.channels:
                    header.garbage = True
        for word in words:
            if not _attribute(header, word):
                header.content_type = word
    return header


def _attribute(header: Header, word: str) -> bool:
    match = _ATTR.match(word)
    if match is None:
        return False
    key, value = match.groups()
    header.attrs[key] = value
    if key == "to":
        header.recipient = value or None
    elif key == "content_type":
        header.content_type = value
    return True


def _structured(header_text: str, output_text: str, opened_in_output: bool) -> bool:
    """Whether cut-off header text was markup (dropped) rather than plain text (content): the
    output opened the message, a header marker is in it, or the output began with ``to=…``."""
    return (opened_in_output or CHANNEL in header_text or CONSTRAIN in header_text
            or _RECIPIENT.match(output_text) is not None)


# ---------------------------------------------------------------------------------------- start state


@dataclass(frozen=True)
class Start:
    """Where the output begins, judged from the rendered prompt.

    ``prefix`` is header text the prompt already holds (after its last ``<|start|>``); ``opened``
    says a message is open (its role comes first); ``in_body`` says the prompt ended right after
    ``<|message|>``, so the output begins inside that message's body.
    """

    prefix: str = "assistant"
    opened: bool = True
    in_body: bool = False


GENERATION_PROMPT = Start()  # the prompt ends with ``<|start|>assistant`` (gpt-oss's template)
ANALYSIS_BODY = Start(prefix=HARMONY.reasoning_header, in_body=True)


def start_from_prompt(prompt: str | None, dialect: Dialect = HARMONY) -> Start:
    """The start state for a rendered prompt; without one, assume ``<|start|>assistant``."""
    if not prompt:
        return GENERATION_PROMPT
    at = prompt.rfind(START)
    if at < 0:
        return GENERATION_PROMPT
    tail = prompt[at + len(START):]
    if any(t in tail for t in dialect.terminators):  # the prompt closed its last message
        return Start(prefix="", opened=False)
    body_at = tail.find(MESSAGE)
    if body_at >= 0:
        return Start(prefix=tail[:body_at], in_body=True)
    return Start(prefix=tail)


# ---------------------------------------------------------------------------------------- the program


class _Joined:
    """The messages of one kind written to one channel, separated by ``sep``. With ``strip`` the
    whitespace a message begins with is dropped (reasoning)."""

    __slots__ = ("_any", "_emit", "_fresh", "_sep", "_strip")

    def __init__(self, emit: Write, sep: str, strip: bool) -> None:
        self._emit = emit
        self._sep = sep
        self._strip = strip
        self._any = False
        self._fresh = True

    def open(self) -> Write:
        """A new message begins; returns its writer."""
        self._fresh = True
        return self.write

    def resume(self) -> Write:
        """The current message goes on (after text that reached the channel another way)."""
        self._any = True
        self._fresh = False
        return self.write

    def write(self, text: str) -> None:
        if self._fresh:
            if self._strip:
                text = text.lstrip(_WS)
            if not text:
                return
            if self._any:
                text = self._sep + text
            self._any = True
            self._fresh = False
        self._emit(text)


# how a body ended: the marker that opens the next message (START, CHANNEL), "" for a message
# that simply ended, or None for the end of the output
Next = str | None


class HarmonyRun:
    """One response: the message loop and the body readers (see the module docstring)."""

    def __init__(self, cur: Cursor, out: Out, dialect: Dialect, start: Start,
                 tool_names: frozenset[str], calls: bool, tools: Mapping[str, ToolSpec] | None = None) -> None:
        self.cur = cur
        self.out = out
        self.dialect = dialect
        self.sets = _sets(dialect)
        self.start = start
        self.tools: Mapping[str, ToolSpec] = tools or {}
        self.tool_names = tool_names | frozenset(self.tools)
        self.calls = calls
        self.content = _Joined(out.content.write, "\n\n", strip=False)
        self.reasoning = _Joined(out.reasoning.write, "\n", strip=True)

    # ---------------------------------------------------------------- messages

    def run(self) -> Generator[None, None, None]:
        cur, start = self.cur, self.start
        prefix, opened, in_output = start.prefix, start.opened, False
        if start.in_body:
            nxt = yield from self.body(parse_header(prefix, opened, self.dialect))
            if nxt is None:
                return
            prefix, opened, in_output = self._next(nxt)
        while True:
            text, marker = yield from cur.read_until(self.sets.header, HEADER_LIMIT)
            # the prompt's part of the header is complete: the output cannot extend its last word
            header_text = prefix + " " + text if prefix else text
            if marker == MESSAGE:
                nxt = yield from self.body(parse_header(header_text, opened, self.dialect))
            elif marker is not None:  # a terminator or <|start|> before any <|message|>
                if parse_header(header_text, opened, self.dialect).garbage:
                    self._garbage(text)
                nxt = marker if marker == START else ""
            elif len(text) <= HEADER_LIMIT:  # end of output inside the header
                if _structured(header_text, text, in_output):
                    yield from cur.rest(discard)
                else:
                    yield from cur.rest(self.content.open())
                return
            else:  # no header end in sight: this is text, not a header
                nxt = yield from self.text_body(self.content.open(), garbled=True)
            if nxt is None:
                return
            prefix, opened, in_output = self._next(nxt)

    @staticmethod
    def _next(nxt: str) -> tuple[str, bool, bool]:
        """Header prefix, opened, opened-in-output for the message after ``nxt``."""
        if nxt == START:
            return "", True, True
        if nxt == CHANNEL:
            return CHANNEL, False, False
        return "", False, False

    def _garbage(self, header_text: str) -> None:
        text = header_text.replace(CHANNEL, "").replace(CONSTRAIN, "")
        if text.strip(_WS):
            self.content.open()(text)

    def body(self, header: Header) -> Generator[None, None, Next]:
        """Read one message body (``<|message|>`` consumed) according to its header."""
        dialect = self.dialect
        if header.role is not None and (header.role in OTHER_ROLES or "." in header.role):
            return (yield from self.skipped_body())
        if header.recipient == "assistant":
            header.recipient = None
        recipient = header.recipient
        if dialect.is_reasoning(header):
            nxt = yield from self.text_body(self.reasoning.open())
            self.out.reasoning.drop_held()
            return nxt
        if recipient is not None and recipient not in dialect.content_recipients:
            if dialect.invokes is not None:
                if self.calls:
                    return (yield from self.invokes_body(dialect.invokes))
                return (yield from self.text_body(self.content.open()))
            name = self._function_name(recipient)
            if name is None:
                return (yield from self.skipped_body())
            if self.calls:
                call_id = header.attrs.get(dialect.call_id_key) if dialect.call_id_key else None
                return (yield from self.call_body(name, call_id or None))
            return (yield from self.json_text_body(self.content.open()))
        return (yield from self.text_body(self.content.open()))

    def _function_name(self, recipient: str) -> str | None:
        prefix = self.dialect.function_prefix
        if prefix is None:
            return recipient
        if recipient.startswith(prefix):
            return recipient[len(prefix):] or None
        return recipient if recipient in self.tool_names else None

    # ---------------------------------------------------------------- bodies

    def text_body(self, write: Write, garbled: bool = False) -> Generator[None, None, Next]:
        """Text up to the terminator that ends the message (see the module docstring)."""
        cur, sets = self.cur, self.sets
        stops = sets.garbled if garbled else sets.body
        while True:
            marker = yield from cur.until(stops, write)
            if marker is None:
                return None
            if marker in self.dialect.terminators:
                space: list[str] = []
                if not (yield from cur.skip_ws(space.append)):
                    return None
                follower = yield from cur.match(self.dialect.followers)
                if follower is not None:
                    return follower if follower in (START, CHANNEL) else ""
                write(marker + "".join(space))  # a terminator written as text
            elif marker == START:  # only in garbled text: a real message begins
                return START
            elif marker in sets.escapes:
                write(marker[1:])
            elif (sets.literal_end is not None and marker == self.dialect.literal[0]  # type: ignore[index]
                  and (yield from cur.until(sets.literal_end, write)) is None):
                return None
            # other markers (header markers in garbled text, a stray literal end) are dropped

    def json_text_body(self, write: Write) -> Generator[None, None, Next]:
        """A body that may be JSON, as text: a leading JSON value is read as a unit (markers in
        its strings are text), the rest as a text body."""
        cur = self.cur
        yield from cur.skip_ws()
        if (yield from cur.peek()) == "{":
            yield from cur.json_value(write, self.sets.stop)
        return (yield from self.text_body(write))

    def skipped_body(self) -> Generator[None, None, Next]:
        """A body nobody receives (built-in tool call, another role's message): consumed, dropped."""
        return (yield from self.json_text_body(discard))

    def call_body(self, name: str, call_id: str | None) -> Generator[None, None, Next]:
        """A tool call: the JSON arguments stream to the call; anything else is content."""
        cur, calls = self.cur, self.out.calls
        if self.dialect.params is not None:
            return (yield from self.params_body(name, call_id, self.dialect.params))
        yield from cur.skip_ws()
        if (yield from cur.peek()) != "{":
            return (yield from self.text_body(self.content.open()))
        calls.begin()
        calls.header(name, call_id)
        ok = yield from cur.json_value(calls.args, self.sets.stop)
        ended: str | None = None
        if ok:
            yield from cur.skip_ws()
            ended = yield from cur.match(self.dialect.terminators)
            if ended is None:  # the stop token <|call|> is usually not in the text
                ok = cur.eof and cur.available == 0 and not cur.truncated
        calls.end(ok)
        if ended is not None:
            return ""
        # a failed call's text became content (its ``raw``); the rest of the body follows it
        return (yield from self.text_body(self.content.resume()))

    def params_body(self, name: str, call_id: str | None, spelling: XmlArgs) -> Generator[None, None, Next]:
        """A tool call whose body is XML parameters (``Dialect.call_body``), converted to JSON as
        they stream; it ends at a terminator (or where the output ends: ``<|call|>`` is a stop token)."""
        calls = self.out.calls
        calls.begin()
        calls.header(name, call_id)
        ok, ended = yield from xml_params_until(spelling, self.tools.get(name), self.cur, self.out,
                                                self.dialect.terminators, open_end=True)
        calls.end(ok)
        if ended is not None:
            return ""
        if ok:
            return None
        # a failed call's text became content (its ``raw``); the rest of the body follows it
        return (yield from self.text_body(self.content.resume()))

    def invokes_body(self, spec: CallBody) -> Generator[None, None, Next]:
        """A tool message whose body holds XML invokes in a section (``Dialect.call_body``); any
        other text in it is content."""
        cur, calls, sets = self.cur, self.out.calls, self.sets
        assert sets.invokes is not None and sets.name_end is not None
        yield from cur.skip_ws()
        if not (yield from cur.expect(spec.section[0])):
            return (yield from self.text_body(self.content.open()))
        while True:
            marker = yield from cur.until(sets.invokes, discard)
            if marker is None:
                return None
            if marker == START:  # the message ended without its terminator
                return START
            if marker in self.dialect.terminators:
                cur.unread(len(marker))
                break
            if marker == spec.section[1]:
                yield from cur.skip_ws()
                break
            calls.begin(marker)
            ok = False
            name, term = yield from cur.read_until(sets.name_end, limit=512)
            if term is not None and name.strip():
                ok = yield from xml_call(spec.shape, self.tools, cur, self.out, self._offered(name.strip()))
            if not calls.end(ok):  # its text became content; the rest of the body follows it
                return (yield from self.text_body(self.content.resume()))
        return (yield from self.text_body(self.content.open()))

    def _offered(self, name: str) -> str:
        """An invoke's name as an offered tool: ``NS.NS`` is ``NS``, a dotted name whose last part
        names exactly one offered tool is that tool; other names are kept."""
        names = self.tool_names
        if not names or name in names or "." not in name:
            return name
        head, _, tail = name.partition(".")
        if head == tail and head in names:
            return head
        leaf = name.rsplit(".", 1)[-1]
        matches = [n for n in names if n.rsplit(".", 1)[-1] == leaf]
        return matches[0] if len(matches) == 1 else name


def harmony_messages(cur: Cursor, out: Out, dialect: Dialect, start: Start,
                     tool_names: frozenset[str] = frozenset(), calls: bool = True,
                     tools: Mapping[str, ToolSpec] | None = None) -> Generator[None, None, None]:
    """The program body for a Harmony-like envelope. With ``calls=False`` (reasoning parser only)
    a call message's body is passed through as content, as written. ``tools`` (the offered tools
    by name) types XML parameters."""
    yield from HarmonyRun(cur, out, dialect, start, tool_names, calls, tools).run()


def harmony_program(dialect: Dialect, start: Start, calls: bool = True,
                    tool_names: frozenset[str] = frozenset()) -> Program:
    """``harmony_messages`` bound to its settings, as a ``Program``."""

    def program(cur: Cursor, out: Out) -> Generator[None, None, None]:
        yield from harmony_messages(cur, out, dialect, start, tool_names, calls)

    return program


def dialect_wire(dialect: Dialect) -> WireFormat:
    """How a dialect writes calls, after the generation prompt's ``<|start|>assistant``: one message
    per call, its header ``Dialect.call_header``. A JSON or XML-parameter body is followed by
    ``<|call|>``, and a further call opens a new message (``<|start|>assistant``); an invokes body
    is a section with one invoke, and a further call opens a new message after the first terminator."""
    head = dialect.call_header + lit(MESSAGE)
    spec = dialect.invokes
    if spec is not None:
        call = (head + lit(spec.section[0] + "\n") + xml_call_template(spec.call_start, spec.shape)
                + lit("\n" + spec.section[1]))
        return WireFormat(call, separator=lit(dialect.terminators[0] + START + "assistant"),
                          args=xml_params(spec.shape.args))
    params = dialect.params
    return WireFormat(head + "$args" + lit(CALL), separator=lit(START + "assistant"),
                      args=xml_params(params, newlines=False) if params is not None else JSON_ARGS)


#: gpt-oss: each call is a ``commentary`` message to ``functions.NAME`` with a JSON body
HARMONY_WIRE = dialect_wire(HARMONY)


def harmony(dialect: Dialect) -> ToolFormat:
    """A Harmony-like envelope as a tool-call format: it carries reasoning and content too
    (``handles_reasoning``), and its start state comes from the prompt (``ctx.prompt``). How it
    writes calls, and what shows a call, follow from the dialect."""

    def read(ctx: CallContext, cur: Cursor, out: Out) -> Generator[None, None, None]:
        # a generator: the prompt is read when parsing begins, i.e. after the detector's ``prepare``
        start = start_from_prompt(ctx.prompt, dialect)
        yield from harmony_messages(cur, out, dialect, start, frozenset(ctx.tools_by_name), calls=True,
                                    tools=ctx.tools_by_name)

    spec = dialect.invokes
    starts = (START, spec.section[0]) if spec is not None else (START, CHANNEL)
    sniff = dialect.call_sniff or (spec.section[0] if spec is not None else "to=" + (dialect.function_prefix or ""))
    return ToolFormat(read=read, start_markers=starts, markers=dialect.markers, wire=dialect_wire(dialect),
                      trim_around_calls=False,  # messages are separated by markers; the program places whitespace
                      handles_reasoning=True, sniff=lambda text: sniff in text)
