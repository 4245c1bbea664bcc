"""A JSON answer wrapped in a Markdown fence, when the request asked for JSON.

With ``response_format`` ``json_object`` / ``json_schema`` the backend is asked to constrain the
answer, but a backend may not apply the constraint (a generic OpenAI-compatible one cannot), and
models then often answer ```` ```json\\n{…}\\n``` ````. ``JsonFence`` is an event filter on such a
run: when the answer's content is exactly one fenced block holding valid JSON (an optional
``json`` tag, whitespace around), the content is the JSON alone; any other content is left as
written.

Streaming: content that does not open with a fence passes straight through (only leading
whitespace, and a leading ```` `` ```` that may still become one, wait). Content that opens with a
fence is held until the end of the answer, since only the whole answer can say whether it is one
fenced block — so a streamed answer and a whole one always agree, and no fence is ever sent.
Reasoning and tool-call events are not touched.
"""

from __future__ import annotations

import json
import re
from typing import Any

from parsers.events import Content, Event

FENCE = "```"
_INNER_FENCE = re.compile(r"(?m)^[ \t]*```")


def _reject(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def unfence(text: str) -> str | None:
    """The JSON inside ``text`` when ``text`` is one fenced block of valid JSON, else ``None``."""
    block = text.strip()
    opening_end = block.find("\n")
    if not block.startswith(FENCE) or not block.endswith(FENCE) or opening_end < 0:
        return None
    if block[len(FENCE):opening_end].strip().lower() not in ("", "json"):
        return None
    body = block[opening_end + 1:-len(FENCE)].strip()
    if _INNER_FENCE.search(body):
        return None
    try:
        json.loads(body, parse_constant=_reject)
    except (ValueError, RecursionError):
        return None
    return body


class JsonFence:
    """Strips the fence around a whole-JSON answer (see the module docstring). Call it on each
    batch of events, then ``finish()`` once at the end of the answer."""

    __slots__ = ("_held", "_opening", "_state")

    def __init__(self) -> None:
        self._held: list[str] = []
        self._opening = ""  # the content's first non-whitespace characters, while deciding
        self._state = "start"  # "start": deciding; "held": fenced, holding all; "pass": as written

    def __call__(self, events: list[Event]) -> list[Event]:
        if self._state == "pass":
            return events
        out: list[Event] = []
        for event in events:
            if type(event) is not Content or self._state == "pass":
                out.append(event)
                continue
            self._held.append(event.text)
            if self._state == "held":
                continue
            self._opening += event.text if self._opening else event.text.lstrip()
            opening = self._opening
            if opening.startswith(FENCE):
                self._state = "held"
            elif not opening or FENCE.startswith(opening):
                continue
            else:
                self._state = "pass"
                out.append(Content("".join(self._held)))
                self._held = []
        return out

    def finish(self) -> list[Event]:
        """The end of the answer: what was held, without its fence if it is one fenced block of JSON."""
        held, self._held = "".join(self._held), []
        self._state = "pass"
        if not held:
            return []
        body = unfence(held)
        return [Content(held if body is None else body)]
