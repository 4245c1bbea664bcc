"""Sections of JSON calls: after an opening marker, a JSON list of call objects (or one object),
then optional closing markup — or such a list bare.

    <|tool_call|>[{"name": "f", "arguments": {…}}, {"name": "g", "arguments": {…}}]   (Granite 3.x)
    functools[{"name": "f", "arguments": {…}}]                                       (Phi-4-mini, FireFunction v2)
    <|START_ACTION|>[{"tool_name": "f", "parameters": {…}}]<|END_ACTION|>             (Cohere)
    I'll check.```json\\n[{"name": "f", "arguments": {…}}]\\n```                       (xLAM)
    [{"name": "f", "arguments": {…}}]         (bare, at the very start of the output: Granite, xLAM, FireFunction)

``Opener`` declares, per opening marker, what may follow it: the optional closing markup after the
calls (``</tool_call>``, a closing code fence, ``<|END_ACTION|>``), whether a list may stand there and
whether a lone call object may stand in for it, whether the opener is ordinary text (a code fence)
that stays content when no list follows, or ends with the list's own ``[`` (``functools[``).

* ``json_block`` reads what one opener opens — the one reader every format with such sections
  uses, alone or beside its own spellings (Mistral's ``[TOOL_CALLS]NAME[ARGS]``, dots' and
  Hunyuan's XML bodies, LFM2's pythonic lists, GigaChat's call turns);
* ``json_list(openers, …)`` declares a whole format of such sections: content, and calls after any
  opener; ``bare_at_start`` — a list may also open the output without any marker (leading
  whitespace is markup then; a bare list whose first element cannot be a call, ``[1, 2]`` or
  ``[{"answer": …}]``, stays content); ``bare_after`` — texts after which a bare list may start too;
  they stay content (xLAM's ``</think>`` when no reasoning parser runs).

Each element's arguments stream through as written (``parsers.shapes.jsoncall``). Each call is
complete once its separator arrives, so a list cut off inside keeps the calls it completed (as
separate call blocks do) and only the cut one is unfinished; a malformed later element leaves the
earlier calls standing and passes through as content; an empty list is markup only. The format writes its calls after ``write`` (an
opener, or nothing for a bare list), elements joined by ``", "``.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping
from dataclasses import dataclass

from parsers.core.cursor import Cursor
from parsers.core.driver import Out
from parsers.core.markers import MarkerSet
from parsers.format import CallContext, ToolFormat
from parsers.shapes.jsoncall import DEFAULT_SHAPE, JsonCallShape, call_template, json_call, json_call_elements
from parsers.shapes.sections import as_tuple
from parsers.wire import WireFormat, lit


@dataclass(frozen=True)
class Opener:
    """What may follow one opening marker."""

    #: optional closing markup after the calls ("</tool_call>", "```"); several: any one of them
    closer: str | tuple[str, ...] = ""
    lone_object: bool = False  # a single call object ``{…}`` is accepted in place of ``[…]``
    literal: bool = False  # ordinary text (a code fence): content unless a list follows, even at the end
    opens_list: bool = False  # the marker ends with the list's own "[" ("functools[")
    lists: bool = True  # a ``[…]`` list of calls may follow (False: one call object only)

    @property
    def closers(self) -> tuple[str, ...]:
        return as_tuple(self.closer) if self.closer else ()


def json_block(cur: Cursor, out: Out, marker: str, opener: Opener, shape: JsonCallShape = DEFAULT_SHAPE,
               stop: MarkerSet | None = None) -> Generator[None, None, bool]:
    """The calls one opening ``marker`` (consumed; no call begun yet) opens, as ``opener`` says: a
    ``[…]`` list, or one call object; every call is begun (the marker and the whitespace after it
    recorded with the first) and ended here; then the closing markup, if there. Returns whether the
    calls were well formed. What follows that is no call list passes through as content (a
    ``literal`` opener stays content; other markup is passed through, or dropped where the output
    ends right after it)."""
    checked = not opener.literal
    if opener.opens_list:
        out.calls.begin(marker)
        ok = yield from json_call_elements(cur, out, shape, stop, first_key_checked=checked)
    else:
        lead: list[str] = [marker]
        yield from cur.skip_ws(lead.append)
        first = yield from cur.peek()
        if first == "[" and opener.lists:
            out.calls.begin("".join(lead))
            yield from cur.expect("[")
            ok = yield from json_call_elements(cur, out, shape, stop, first_key_checked=checked)
        elif first == "{" and opener.lone_object:
            out.calls.begin("".join(lead))
            ok = yield from json_call(cur, out, shape, stop)
            out.calls.end(ok)
        elif opener.literal:  # ordinary text after all
            out.content.write("".join(lead))
            ok = False
        else:  # broken markup: passed through, or dropped where the output ends right here
            out.calls.begin("".join(lead))
            ok = out.calls.end(False)
    if ok and opener.closers:
        yield from cur.skip_ws()
        yield from cur.match(opener.closers)
    return ok


def starts_with_list(text: str) -> bool:
    """Whether ``text`` (an output's beginning) opens with a bare JSON list."""
    return text.lstrip().startswith("[")


def json_list(openers: Mapping[str, Opener], shape: JsonCallShape = DEFAULT_SHAPE, *, write: str | None,
              lead: str = "", bare_at_start: bool = False, bare_after: tuple[str, ...] = (),
              wire: WireFormat | None = None) -> ToolFormat:
    """Content, with call lists after any of ``openers`` (see the module doc). Calls are written
    after ``lead`` + the opener ``write`` (``None``: a bare list) — or as ``wire`` says, when the
    format writes them its own way (Cohere's positions as ``tool_call_id``)."""
    table = dict(openers)
    after = frozenset(bare_after)
    starts = MarkerSet((*table, *after))
    stop = MarkerSet((*table, *(c for o in table.values() for c in o.closers)))

    def bare(cur: Cursor, out: Out) -> Generator[None, None, str | None]:
        """A bare list here (after whitespace), if one starts; an opener found here instead is
        consumed and returned for the caller to handle."""
        lead: list[str] = []
        yield from cur.skip_ws(lead.append)
        marker = yield from cur.match(starts.markers)
        if marker is not None or (yield from cur.peek()) != "[":
            out.content.write("".join(lead))
            return marker
        out.calls.begin("".join(lead))
        yield from cur.expect("[")
        yield from json_call_elements(cur, out, shape, stop, first_key_checked=False)
        return None

    def read(ctx: CallContext, cur: Cursor, out: Out) -> Generator[None, None, None]:
        marker = (yield from bare(cur, out)) if bare_at_start else None
        while True:
            if marker is None:
                marker = yield from cur.until(starts, out.content.write)
                if marker is None:
                    return
            if marker in after:
                out.content.write(marker)
                marker = yield from bare(cur, out)
            else:
                yield from json_block(cur, out, marker, table[marker], shape, stop)
                marker = None

    special = tuple(m for m, o in table.items() if not o.literal)
    literal = tuple(m for m, o in table.items() if o.literal)
    follow = tuple(m + "[" for m in after)

    def sniff(text: str) -> bool:
        return any(m in text for m in (*special, *literal, *follow)) or (bare_at_start and starts_with_list(text))

    if wire is None:
        if write is None:
            opening, closing, trigger = "[", "]", ""
        else:
            opener = table[write]
            opening = write if opener.opens_list else write + "["
            closing = "]" + (opener.closers[0] if opener.closers else "")
            trigger = None
        wire = WireFormat(call_template(shape), section=(lit(lead + opening), lit(closing)), separator=", ",
                          trigger_word=trigger)
    closers = tuple(c for o in table.values() if not o.literal for c in o.closers)
    return ToolFormat(read=read, start_markers=special, markers=(*special, *closers), wire=wire, sniff=sniff)
