"""The legacy ``/v1/completions`` request, checked before it is passed through."""

from __future__ import annotations

from pydantic import Field

from app.api.protocol import Lenient


class CompletionRequest(Lenient):
    """Legacy ``/v1/completions``: passed through to the backend, within the server's limits."""

    model: str | None = None
    prompt: str | list[str] | list[int] | list[list[int]] = Field(min_length=1)
    stream: bool = False
    max_tokens: int | None = Field(default=None, ge=1)
    n: int = Field(default=1, ge=1, le=8)
    best_of: int | None = Field(default=None, ge=1, le=8)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, ge=0, le=1)
