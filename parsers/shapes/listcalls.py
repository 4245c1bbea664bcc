"""Tool calls written as a JSON list of call objects, after an opening marker or bare.

    <|tool_call|>[{"name": "f", "arguments": {…}}, {"name": "g", "arguments": {…}}]   (Granite 3.x)
    functools[{"name": "f", "arguments": {…}}]                                       (Phi-4-mini, FireFunction v2)
    I'll check.```json\\n[{"name": "f", "arguments": {…}}]\\n```                       (xLAM)
    [{"name": "f", "arguments": {…}}]         (bare, at the very start of the output: Granite, xLAM, FireFunction)

``json_list(openers, …)`` declares such a format from data:

* ``openers`` — marker → ``Opener``: the optional closing markup after the list (``</tool_call>``,
  a closing code fence), whether a lone call object may stand in for the list, and whether the
  opener is ordinary text (a code fence) that stays content when no list follows, or ends with
  the list's own ``[`` (``functools[``);
* ``bare_at_start`` — a list may also open the output without any marker (leading whitespace is
  markup then); a bare list whose first element cannot be a call (``[1, 2]``, ``[{"answer": …}]``)
  stays content;
* ``bare_after`` — texts after which a bare list may start too; they stay content (xLAM's
  ``</think>`` when no reasoning parser runs).

Each element's arguments stream through as written (``parsers.shapes.jsoncall``). Calls are ended
one by one, so the calls before a broken or cut-off element stand; an empty list is markup only.
Whatever fails to parse passes through as content. The format writes its calls after ``write``
(an opener, or nothing for a bare list), elements joined by ``", "``.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping
from dataclasses import dataclass

from parsers.core.cursor import Cursor
from parsers.core.driver import Out
from parsers.core.markers import MarkerSet
from parsers.format import CallContext, ToolFormat
from parsers.shapes.jsoncall import DEFAULT_SHAPE, JsonCallShape, call_template, json_call, json_call_elements
from parsers.wire import WireFormat, lit


@dataclass(frozen=True)
class Opener:
    """What may follow one opening marker."""

    closer: str = ""  # optional closing markup after the list ("</tool_call>", "```")
    lone_object: bool = False  # a single call object ``{…}`` is accepted in place of ``[…]``
    literal: bool = False  # ordinary text (a code fence): content unless a list follows, even at the end
    opens_list: bool = False  # the marker ends with the list's own "[" ("functools[")


def starts_with_list(text: str) -> bool:
    """Whether ``text`` (an output's beginning) opens with a bare JSON list."""
    return text.lstrip().startswith("[")


def json_list(openers: Mapping[str, Opener], shape: JsonCallShape = DEFAULT_SHAPE, *, write: str | None,
              lead: str = "", bare_at_start: bool = False, bare_after: tuple[str, ...] = ()) -> ToolFormat:
    """Content, with call lists after any of ``openers`` (see the module doc). Calls are written
    after ``lead`` + the opener ``write`` (``None``: a bare list)."""
    table = dict(openers)
    after = frozenset(bare_after)
    starts = MarkerSet((*table, *after))
    stop = MarkerSet((*table, *(o.closer for o in table.values() if o.closer)))

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

    def after_marker(cur: Cursor, out: Out, marker: str) -> Generator[None, None, None]:
        opener = table[marker]
        checked = not opener.literal
        if opener.opens_list:
            out.calls.begin(marker)
            ok = yield from json_call_elements(cur, out, shape, stop, first_key_checked=checked)
        else:
            lead: list[str] = [marker]
            yield from cur.skip_ws(lead.append)
            first = yield from cur.peek()
            if first == "[":
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
        if ok and opener.closer:
            yield from cur.closing(opener.closer)

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
                yield from after_marker(cur, out, marker)
                marker = None

    special = tuple(m for m, o in table.items() if not o.literal)
    literal = tuple(m for m, o in table.items() if o.literal)
    follow = tuple(m + "[" for m in after)

    def sniff(text: str) -> bool:
        return any(m in text for m in (*special, *literal, *follow)) or (bare_at_start and starts_with_list(text))

    if write is None:
        opening, closing, trigger = "[", "]", ""
    else:
        opener = table[write]
        opening = write if opener.opens_list else write + "["
        closing = "]" + opener.closer
        trigger = None
    wire = WireFormat(call_template(shape), section=(lit(lead + opening), lit(closing)), separator=", ",
                      trigger_word=trigger)
    closers = tuple(o.closer for o in table.values() if o.closer and not o.literal)
    return ToolFormat(read=read, start_markers=special, markers=(*special, *closers), wire=wire, sniff=sniff)
