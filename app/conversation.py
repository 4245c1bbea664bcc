"""The conversation every API face decodes into: one normalised shape for history.

Chat Completions, the Responses API and the Anthropic Messages API all describe the same things —
system text, user and assistant turns, the tool calls an assistant made (with their ids), tool
results pointing back at those ids, and reasoning handed back — each in its own wire shape. A face
turns its request into a list of ``Turn``; ``app.templates.prompt`` renders that list with the
model's chat template. Nothing here knows a wire format or a template.

Contract of a ``Turn``:

* ``role`` is ``system``, ``user``, ``assistant`` or ``tool`` (``developer`` is decoded as
  ``system``: OpenAI gives it the same meaning);
* ``text`` is the turn's text, ``""`` when it had none (``null`` / missing content on an assistant
  turn that only calls tools);
* ``calls`` (assistant only) are the calls it made, in order, each with the id the client knows it
  by; ``reasoning`` is reasoning handed back with the turn (``None``: none);
* ``tool_call_id`` (tool only) names the call this result answers; ``name`` is the tool's or the
  speaker's name where the client gave one;
* ``extra`` holds any other field the client set on a Chat Completions message, passed on to the
  template unchanged (templates read model-specific fields such as ``prefix``);
* ``parts`` (user and tool turns) is the turn's content in order when it holds images or documents
  (``app.media``): its text pieces and media items as the client gave them, one piece per text
  part; empty for a text-only turn. ``text`` is then the pieces joined as the face joins text.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from app.media import Part

Role = Literal["system", "user", "assistant", "tool"]


@dataclass(frozen=True, slots=True)
class Call:
    """A tool call made in an earlier turn. ``arguments`` is JSON text or an already-decoded object."""

    id: str
    name: str
    arguments: str | Mapping[str, Any] = "{}"


@dataclass(slots=True)
class Turn:
    role: Role
    text: str = ""
    calls: tuple[Call, ...] = ()
    reasoning: str | None = None
    tool_call_id: str | None = None
    name: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    parts: tuple[Part, ...] = ()
    #: a form of this turn derived by whoever derives it (``app.templates.prompt``: its template
    #: message), kept with what it was derived from; not part of the turn (never compared, copied or
    #: pickled)
    derived: Any = field(default=None, compare=False, repr=False)

    def __reduce__(self) -> tuple[Any, ...]:
        return Turn, (self.role, self.text, self.calls, self.reasoning, self.tool_call_id, self.name, self.extra,
                      self.parts)
