"""Text that carries its own JSON encoding.

An agent's next prompt is mostly its previous one: the render cache (``app.templates.resume``)
keeps the JSON encoding of each piece it puts back, so the request body to the backend takes the
prompt's encoding as made, instead of encoding the whole text again every turn.
"""

from __future__ import annotations

from typing import Any, Self

import orjson


class JsonText(str):
    """A ``str`` whose ``json`` is exactly ``orjson.dumps(str(self))``. Whoever makes one vouches for
    that; every string operation on it (slicing, ``+``, ``str()``) gives a plain ``str``, so the
    encoding never follows text it was not made for."""

    json: bytes

    def __new__(cls, text: str, encoded: bytes) -> Self:
        self = super().__new__(cls, text)
        self.json = encoded
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        return JsonText, (str(self), self.json)


def dumps_body(body: dict[str, Any]) -> bytes:
    """``orjson.dumps(body)``, with each top-level ``JsonText`` value written as its own encoding."""
    if JsonText in set(map(type, body.values())):
        body = {key: orjson.Fragment(value.json) if type(value) is JsonText else value for key, value in body.items()}
    return orjson.dumps(body)
