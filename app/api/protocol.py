"""What every face's request models share: lenient pydantic models (fields a face does not know are
kept, not refused), and the first validation problem as a located message."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, ValidationError


class Lenient(BaseModel):
    """A request model that keeps fields it does not declare (clients send many a server ignores)."""

    model_config = ConfigDict(extra="allow")


def validation_message(exc: ValidationError) -> tuple[str, str | None]:
    """The first validation problem as ``(message, param)`` (``param`` in OpenAI's dotted spelling)."""
    error = exc.errors()[0]
    loc = ".".join(str(p) for p in error.get("loc", ()) if not isinstance(p, str) or not p.startswith("function-"))
    msg = error.get("msg", "invalid value").removeprefix("Value error, ")
    return (f"{loc}: {msg}" if loc else msg), (loc or None)
