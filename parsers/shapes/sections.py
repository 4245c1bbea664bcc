"""The outer loop most tool-call formats share: content, then calls (optionally inside a section).

``marker_calls(...)`` builds a format's program (``parsers.format.Read``) from:

* ``call_starts`` — markers that open one call (``<tool_call>``, ``<｜tool▁call▁begin｜>`` …);
* ``read_call(ctx, cursor, out, marker)`` — reads one call after its opening marker (the call is
  begun and ended here), returning whether it was complete;
* ``section`` — an optional ``(begin, end)`` pair (or several alternative pairs) wrapping a run of
  calls (``<|tool_calls_section_begin|>`` … ``<|tool_calls_section_end|>``). Text between calls
  inside a section is markup, not content. With ``bare_calls`` a call may also appear outside any
  section.

After a malformed call the rest of a section is read as content again, so nothing is lost. Where
calls may stand outside a section (``bare_calls``: models drop the opener — Kimi K2 at
``<|tool_call_begin|>``, DeepSeek V4 at a DSML ``invoke``), a run of such calls reads as the
section would: whitespace between them is markup, and the section's end after them (or anywhere
in the content, with no opener before it) is dropped.
``markup`` lists texts that are dropped wherever they stand in the content (Trinity's stray
``<think>``/``</think>`` around calls written inside its thinking); the text around them is kept
as written.
``calls_format(...)`` wraps such a program in a ``ToolFormat`` whose start markers and markers are
derived from the same call starts and sections.
"""

from __future__ import annotations

from collections.abc import Callable, Generator

from parsers.core.cursor import Cursor, discard
from parsers.core.driver import Out
from parsers.core.markers import MarkerSet
from parsers.format import CallContext, Read, ReadCall, ToolFormat
from parsers.wire import WireFormat

Section = tuple[str, str]
#: one section pair or several alternative pairs
Sections = Section | tuple[Section, ...]
ReadOne = Callable[[str], Generator[None, None, bool]]


def as_tuple(texts: str | tuple[str, ...]) -> tuple[str, ...]:
    return (texts,) if isinstance(texts, str) else tuple(texts)


def section_pairs(section: Sections | None) -> tuple[Section, ...]:
    """``section`` as a tuple of ``(begin, end)`` pairs."""
    if not section:
        return ()
    if isinstance(section[0], str):
        begin, end = section
        assert isinstance(begin, str) and isinstance(end, str)
        return ((begin, end),)
    return tuple(pair for pair in section if isinstance(pair, tuple))


def section_calls(cur: Cursor, out: Out, inside: MarkerSet, end: str, read_one: ReadOne) -> Generator[None, None, bool]:
    """The calls inside one section, up to its ``end`` marker (consumed). ``inside`` holds the
    call openers and ``end``; text between calls is markup. ``read_one(marker)`` reads one call
    after its opener (begun and ended here). After a malformed call this returns, so the rest is
    read as content again. Returns ``False`` when the output ended inside the section. A section
    the model ended its output in before any call began is its opener alone: the opener is markup,
    the text after it content (never lost) — unless the output was cut off there."""
    opened = False
    before: list[str] | None = []  # the text before the first call (given back if none comes)
    while True:
        marker = yield from cur.until(inside, discard if before is None else before.append)
        if marker is None:
            if not opened:  # a section that ends before any call: its opener is markup
                out.content.boundary()
                if before and not cur.truncated:
                    out.content.write("".join(before))
            return False
        before = None
        if marker == end:
            out.content.boundary()
            return True
        opened = True
        out.calls.begin(marker)
        if not out.calls.end((yield from read_one(marker))):
            return True


def _after_bare_call(cur: Cursor, out: Out, starts: tuple[str, ...], ends: tuple[str, ...]) -> Generator[None, None, None]:
    """After a complete call outside any section, in a format whose calls belong in one (the model
    left the opener out): the run of calls is that section — whitespace up to the next call or to
    the section's end is markup, and the end is dropped. Anything else: the whitespace is content."""
    held: list[str] = []
    yield from cur.skip_ws(held.append)
    if (yield from cur.match(ends)) is not None:
        out.content.boundary()
    elif (yield from cur.match(starts, consume=False)) is None:
        out.content.write("".join(held))


def marker_calls(call_starts: str | tuple[str, ...], read_call: ReadCall,
                 section: Sections | None = None, bare_calls: bool = False, markup: tuple[str, ...] = ()) -> Read:
    """A format's program: content, and calls after ``call_starts`` (see the module docstring)."""
    starts = as_tuple(call_starts)
    sections = dict(section_pairs(section))
    orphans = tuple(sections.values()) if bare_calls else ()  # section ends whose opener the model left out
    outer = MarkerSet(((*sections, *starts, *orphans) if bare_calls or not sections else tuple(sections)) + markup)
    inner = {begin: MarkerSet((*starts, end)) for begin, end in sections.items()}
    dropped = frozenset(markup)

    def read(ctx: CallContext, cur: Cursor, out: Out) -> Generator[None, None, None]:
        def read_one(opener: str) -> Generator[None, None, bool]:
            return (yield from read_call(ctx, cur, out, opener))

        while True:
            marker = yield from cur.until(outer, out.content.write)
            if marker is None:
                return
            if marker in dropped:
                continue
            if marker in orphans:
                out.content.boundary()
                continue
            if marker not in sections:
                out.calls.begin(marker)
                if out.calls.end((yield from read_call(ctx, cur, out, marker))) and orphans:
                    yield from _after_bare_call(cur, out, starts, orphans)
                continue
            if not (yield from section_calls(cur, out, inner[marker], sections[marker], read_one)):
                return

    return read


def calls_format(call_starts: str | tuple[str, ...], read_call: ReadCall, *, wire: WireFormat,
                 section: Sections | None = None, bare_calls: bool = False, markers: tuple[str, ...] = (),
                 markup: tuple[str, ...] = (), trim_around_calls: bool = True) -> ToolFormat:
    """A ``ToolFormat`` over ``marker_calls``: its start markers are the section openers (and the
    call starts where calls may stand outside a section), its markers the sections, the call
    starts, ``markers`` (the other marker texts ``read_call`` knows) and the ``markup`` dropped
    from the content."""
    starts = as_tuple(call_starts)
    pairs = section_pairs(section)
    openers = tuple(begin for begin, _ in pairs)
    return ToolFormat(
        read=marker_calls(starts, read_call, section, bare_calls, markup),
        start_markers=(*openers, *starts) if bare_calls or not pairs else openers,
        markers=(*(m for pair in pairs for m in pair), *starts, *markers, *markup),
        wire=wire,
        trim_around_calls=trim_around_calls,
    )
