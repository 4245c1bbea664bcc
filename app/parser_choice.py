"""The parsers a server runs with, and why each was chosen."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ParserChoice:
    """The parsers in use (``None``: not parsed): canonical registry names, or detector classes
    that ``auto`` built from the chat template; ``why`` says how each was chosen."""

    reasoning: str | type | None = None
    tools: str | type | None = None
    why: dict[str, str] = field(default_factory=dict)
