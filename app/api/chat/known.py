"""Messages decoded before: an agent's next turn repeats every earlier message byte for byte, so
they are validated and turned into the shared conversation once, not once per turn.

``KnownMessages`` keeps, per process, the decoded form of recent requests' message lists — each
message's validated model (``ChatMessage``) and its ``Turn`` — under the exact serialisation of
the raw messages (``app.templates.resume.serialised``: the messages as parsed from the request's
JSON, serialised again by ``orjson`` — exact for what a JSON parser makes — item bounds compared
too; the render cache's index). A request whose first messages are, byte for byte, an earlier
list of the same tenant's (the tenant is part of the key) takes their decodings from it and
decodes only the rest. A message's decoding depends on
that message and its index only (call ids default to ``call_{index}_{k}``), so a known prefix
decodes as it did. Requests in the deprecated ``functions`` shape, whose decoding looks across
messages, are never kept nor served from here. The shared ``Turn`` objects are read-only from
here on (rendering never changes a turn it is given).

Bounded in bytes (the raw serialisation counted three times: bytes, models and turns), least
recently used dropped first; lists shorter than ``min_messages`` are decoded whole and not kept.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from app.templates.resume import Entry, RenderCache, serialised

if TYPE_CHECKING:
    from app.api.chat.protocol import ChatMessage
    from app.conversation import Turn

#: the digest key's salt (one cache per process; the bytes compared are the raw messages')
_SALT = b"toolwire-chat-messages"


@dataclass(frozen=True, slots=True)
class Known:
    """A request's messages as far as they are known: how many, their models and turns, and the
    serialisation of all of them (to keep the request's own decoding once it is complete)."""

    count: int
    models: list[ChatMessage]
    turns: list[Turn]
    sequence: tuple[bytes, bytes, list[int]] | None


class KnownMessages:
    """Decoded message lists by their exact bytes (see the module docstring)."""

    def __init__(self, max_bytes: int = 0, min_messages: int = 4) -> None:
        self.min_messages = min_messages
        self._cache = RenderCache(max_bytes)

    def clear(self) -> None:
        """Forget every list (benchmarks measure a first request this way)."""
        self._cache = RenderCache(self._cache.max_bytes)

    @property
    def bytes(self) -> int:
        return self._cache.bytes

    def __len__(self) -> int:
        return len(self._cache)

    def find(self, messages: list[Any], max_bytes: int, tenant: str = "") -> Known:
        """What is known of ``messages`` (as parsed from the request's JSON) to ``tenant``: the
        longest list of theirs decoded before that these start with, never all of them (the
        request model wants one message at least to validate). ``max_bytes`` is the bound from here
        on (the process's setting; 0: off)."""
        self._cache.max_bytes = max_bytes
        if len(messages) < self.min_messages or max_bytes <= 0:
            return Known(0, [], [], None)
        try:
            sequence = serialised(_SALT + tenant.encode(), messages, parsed_json=True)
        except ValueError:  # not exactly serialisable (``_Inexact``): decode it whole
            return Known(0, [], [], None)
        entry = self._cache.longest(*sequence)
        if entry is None or entry.items is None:
            return Known(0, [], [], sequence)
        count = min(len(entry.ends), len(messages) - 1)
        pairs = entry.items[:count]
        return Known(count, [model for model, _turn in pairs], [turn for _model, turn in pairs], sequence)

    def keep(self, known: Known, models: list[ChatMessage], turns: list[Turn]) -> None:
        """Keep a request's whole decoding (``models`` and ``turns``: one per message)."""
        if known.sequence is None or len(models) != len(known.sequence[2]) or len(turns) != len(models):
            return
        key, joined, ends = known.sequence
        size = 3 * len(joined) + 200 * len(ends)
        self._cache.put(Entry([], key, joined, ends, b"", list(zip(models, turns, strict=True)), size))
