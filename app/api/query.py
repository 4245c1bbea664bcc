"""Query parameters, read strictly: a value that is not exactly a valid one is a 400 naming the
parameter, never a guess. A parameter given twice is a 400 too (which one was meant?).

* ``flag``: ``true`` or ``false`` (``1`` and ``0`` too); ``yes``, ``True``, an empty value are not.
* ``number``: ASCII digits only, within the bounds — no sign, no spaces, no ``_`` separators, no
  other script's digits (Python's ``int()`` takes all of those).
* ``choice``: one of the listed words.
* ``text``: a non-empty value.

Parameters a route does not read are left alone (clients add their own).
"""

from __future__ import annotations

from starlette.datastructures import QueryParams

from app.errors import bad_request

#: longest a number may be written (digits): far past any bound a route sets
MAX_DIGITS = 18
_TRUE, _FALSE = ("true", "1"), ("false", "0")


def _shown(raw: str) -> str:
    return repr(raw if len(raw) <= 40 else raw[:40] + "…")


def one(query: QueryParams, name: str) -> str | None:
    """The parameter's value (``None`` when it is absent); a 400 when it is given more than once."""
    values = query.getlist(name)
    if len(values) > 1:
        raise bad_request(f"{name}: given {len(values)} times; send it once", name)
    return values[0] if values else None


def flag(query: QueryParams, name: str, default: bool = False) -> bool:
    raw = one(query, name)
    if raw is None:
        return default
    if raw in _TRUE:
        return True
    if raw in _FALSE:
        return False
    raise bad_request(f"{name}: expected true or false, got {_shown(raw)}", name)


def number(query: QueryParams, name: str, default: int | None, low: int = 0, high: int | None = None) -> int | None:
    raw = one(query, name)
    if raw is None:
        return default
    bounds = f"from {low} to {high}" if high is not None else f"≥ {low}"
    if 0 < len(raw) <= MAX_DIGITS and raw.isascii() and raw.isdigit():
        value = int(raw)
        if value >= low and (high is None or value <= high):
            return value
    raise bad_request(f"{name}: expected an integer {bounds} in digits 0-9, got {_shown(raw)}", name)


def choice(query: QueryParams, name: str, default: str, allowed: tuple[str, ...]) -> str:
    raw = one(query, name)
    if raw is None:
        return default
    if raw not in allowed:
        raise bad_request(f"{name}: expected {' or '.join(allowed)}, got {_shown(raw)}", name)
    return raw


def text(query: QueryParams, name: str) -> str | None:
    raw = one(query, name)
    if raw == "":
        raise bad_request(f"{name}: expected a value, got an empty one", name)
    return raw


__all__ = ["choice", "flag", "number", "one", "text"]
