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


def body_pieces(body: dict[str, Any]) -> list[bytes]:
    """``orjson.dumps(body)`` in pieces to be written one after the other, each top-level
    ``JsonText`` value as its own encoding — a piece of its own, never copied (a long prompt's
    encoding is most of an agent's request to its backend)."""
    if JsonText not in set(map(type, body.values())):
        return [orjson.dumps(body)]
    pieces: list[bytes] = [b"{"]
    plain: dict[str, Any] = {}
    for key, value in body.items():
        if type(value) is JsonText:
            if plain:
                pieces += [orjson.dumps(plain)[1:-1], b","]
                plain = {}
            pieces += [orjson.dumps(key), b":", value.json, b","]
        else:
            plain[key] = value
    if plain:
        pieces += [orjson.dumps(plain)[1:-1], b","]
    pieces[-1] = b"}"
    return pieces
