"""Exact serialisation: the same bytes only for values that render alike.

``exact_bytes`` serialises a template value and ``_item_bytes`` a loop item (``marshal`` where it
can); both raise ``_Inexact`` where two different values could come out alike (a tuple, a
non-finite float, a ``str`` subclass other than tool arguments); ``same_places`` compares two
sequences of such bytes (or of the prefix service's units) place by place. Nothing here knows of
loops or plans."""

from __future__ import annotations

import marshal
import math
from collections.abc import Sequence
from operator import eq
from typing import Any

import jinja2
import orjson
from jinja2.utils import Namespace


class _Inexact(ValueError):
    pass


def _exact_default(value: Any) -> Any:
    """orjson's hook for values it does not serialise itself (subclasses are passed through here):
    each written as bytes no JSON value encodes to (a NUL byte, which orjson escapes in any string),
    the same in every process."""
    kind = type(value)
    if isinstance(value, jinja2.Undefined):
        return orjson.Fragment(b"\x00U")
    if kind is Namespace:
        return orjson.Fragment(b"\x00N" + exact_bytes(object.__getattribute__(value, "_Namespace__attrs")))
    if kind.__name__ == "JsonArguments" and isinstance(value, dict):
        return orjson.Fragment(b"\x00A" + exact_bytes(dict(value)))
    raise TypeError(kind.__name__)


def _check_exact(value: Any) -> None:
    """Raise ``_Inexact`` where orjson would serialise two different values alike (a tuple as a
    list, a non-finite float as null, a ``str`` subclass as a ``str``)."""
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is str or kind is int or kind is bool or item is None:
            continue
        if kind is float:
            if not math.isfinite(item):
                raise _Inexact("non-finite float")
        elif kind is dict or kind.__name__ == "JsonArguments" and isinstance(item, dict):
            stack.extend(item.values())
        elif kind is list:
            stack.extend(item)
        elif kind is Namespace:
            stack.extend(object.__getattribute__(item, "_Namespace__attrs").values())
        elif not isinstance(item, jinja2.Undefined):
            raise _Inexact(kind.__name__)


def exact_bytes(value: Any) -> bytes:
    """``value`` serialised so that two values give the same bytes only if they render alike
    (``_Inexact`` where that cannot be promised)."""
    _check_exact(value)
    try:
        return orjson.dumps(value, default=_exact_default, option=orjson.OPT_PASSTHROUGH_SUBCLASS)
    except (TypeError, orjson.JSONEncodeError) as exc:
        raise _Inexact(str(exc)) from None


def _item_bytes(item: Any) -> bytes:
    """An item serialised exactly: ``marshal`` (C speed, exact types, no shared references at
    version 2) where it can, else ``exact_bytes`` — tagged, so the two never meet (``_Inexact``
    where neither is exact)."""
    try:
        return b"m" + marshal.dumps(item, 2)
    except ValueError:
        return b"j" + exact_bytes(item)


def same_places(old: Sequence[bytes], new: Sequence[bytes | None]) -> list[bool]:
    """Place by place, over the places both have: whether ``old`` and ``new`` hold the same bytes
    there (the very object, or equal bytes)."""
    return list(map(eq, old, new))  # (in C; bytes compare the very object as equal at once)
