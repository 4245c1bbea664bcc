"""Messages decoded before: an agent's next turn repeats every earlier message byte for byte, so
they are validated and turned into the shared conversation once, not once per turn.

``KnownMessages`` keeps, per process and tenant, recent requests' message lists as parsed from
their JSON, with each message's decoding — its validated model (``ChatMessage``) and its ``Turn``.
A request whose first messages are equal to a kept list of the same tenant's takes their decodings
from it and decodes only the rest. A message's decoding depends on that message and its index only
(call ids default to ``call_{index}_{k}``), so a known prefix decodes as it did.

Equal is Python's ``==`` (C speed; nothing is serialised), which is exact only for some messages:
``True == 1 == 1.0`` and two dicts with their keys in another order are equal. So a message is kept
only when every message equal to it decodes alike — it is *plain*: its values are strings, ``None``,
lists and objects of them (no number, no boolean), its call arguments are JSON text, and fields
the request model does not declare (which reach the template in their order) hold strings or
``None`` only — their order is then compared too. A list is kept up to its first message that is
not plain. Requests in the deprecated ``functions`` shape, whose decoding looks across messages,
are never kept nor served from here. The shared ``Turn`` objects are read-only from here on
(rendering never changes a turn it is given).

Bounded in bytes (a message's strings counted three times — as parsed, as a model, as a turn —
plus a fixed share per message), least recently used dropped first; lists shorter than
``min_messages`` are decoded whole and not kept.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

from app.bucketed import BucketedLRU

if TYPE_CHECKING:
    from app.api.chat.protocol import ChatMessage
    from app.conversation import Turn

#: the fields of a Chat Completions message the request model declares (any other is passed on)
DECLARED = frozenset({"role", "content", "name", "tool_calls", "tool_call_id", "reasoning_content", "reasoning"})
#: messages whose JSON files a list under its key (conversations that share them share a bucket)
KEY_MESSAGES = 2
#: bytes a message counts beyond its strings
MESSAGE_OVERHEAD = 200


@dataclass(slots=True, eq=False)
class _Kept:
    """One request's plain messages, as parsed, and their decodings."""

    tenant: str
    key: bytes
    raw: list[Any]
    pairs: list[tuple[ChatMessage, Turn]]
    sizes: list[int]  # each message's size (its strings' bytes, about)
    ordered: list[tuple[int, list[str]]]  # messages with undeclared fields: their index and field order
    size: int
    #: its request was checked and planned (``prepared``: set once it was), on this process's loop
    #: (``here``: its render is cached here) or by a worker
    prepared: bool = False
    here: bool = False


@dataclass(frozen=True, slots=True)
class Known:
    """A request's messages as far as they are known: how many, their models and turns, and what
    keeping the request's own decoding needs (whose, its bucket key and messages, the list found)."""

    count: int
    models: list[ChatMessage]
    turns: list[Turn]
    tenant: str = ""
    key: bytes | None = None
    raw: list[Any] = field(default_factory=list)
    kept: _Kept | None = None


NOTHING = Known(0, [], [])


def plain_size(message: Any) -> tuple[int, list[str] | None] | None:
    """``(size, field order)`` when every message equal to ``message`` (``==``) decodes alike —
    its size in bytes (about), and its fields in order when it has undeclared ones (they must come
    in that order too) — else ``None`` (see the module docstring)."""
    if type(message) is not dict:
        return None
    order: list[str] | None = None
    if not message.keys() <= DECLARED:
        if any(name not in DECLARED and value is not None and type(value) is not str for name, value in message.items()):
            return None
        order = list(message)
    calls = message.get("tool_calls")
    if type(calls) is list and not all(_text_arguments(call) for call in calls):
        return None
    size = _strings_size(message)
    return None if size is None else (size, order)


def _text_arguments(call: Any) -> bool:
    function = call.get("function") if type(call) is dict else None
    return type(function) is not dict or type(function.get("arguments", "")) is str


def _strings_size(value: Any) -> int | None:
    """The bytes (about) of ``value``, made of strings, ``None``, lists and dicts only (else ``None``)."""
    size, stack = 0, [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is dict:
            size += 16 * len(item) + sum(map(len, item))
            stack.extend(item.values())
        elif kind is list:
            size += 8 * len(item)
            stack.extend(item)
        elif kind is str:
            size += len(item)
        elif item is not None:
            return None  # a number or a boolean
    return size


def _key(tenant: str, messages: list[Any]) -> bytes | None:
    digest = hashlib.blake2b(b"toolwire-chat-messages", digest_size=16)
    digest.update(tenant.encode() + b"\0")
    try:
        for message in messages[:KEY_MESSAGES]:
            digest.update(orjson.dumps(message))
    except orjson.JSONEncodeError:
        return None
    return digest.digest()


class KnownMessages:
    """Decoded message lists by their messages' values (see the module docstring)."""

    def __init__(self, max_bytes: int = 0, min_messages: int = 4) -> None:
        self.max_bytes = max_bytes
        self.min_messages = min_messages
        self._filed: BucketedLRU[_Kept] = BucketedLRU(lambda kept: len(kept.raw))

    @property
    def bytes_held(self) -> int:
        return self._filed.bytes

    def clear(self) -> None:
        """Forget every list (benchmarks measure a first request this way)."""
        with self._filed.lock:
            self._filed.clear()

    def __len__(self) -> int:
        return len(self._filed)

    def find(self, messages: list[Any], max_bytes: int, tenant: str = "") -> Known:
        """What is known of ``messages`` (as parsed from the request's JSON) to ``tenant``: the
        longest start they share with a list of theirs decoded before, never all of them (the
        request model wants one message at least to validate). ``max_bytes`` is the bound from here
        on (the process's setting; 0: off)."""
        self.max_bytes = max_bytes
        if len(messages) < self.min_messages or max_bytes <= 0:
            return NOTHING
        key = _key(tenant, messages)
        if key is None:
            return NOTHING
        best, shared = None, 0
        with self._filed.lock:
            for kept in self._filed.bucket(key):
                if kept.tenant != tenant:
                    continue
                n = _shared(kept, messages)
                if n > shared:
                    best, shared = kept, n
                if n == len(kept.raw):  # the longest list that is a whole start of these
                    break
            if best is not None:
                self._filed.touch(best)
        if best is None:
            return Known(0, [], [], tenant, key, messages)
        count = min(shared, len(messages) - 1)
        pairs = best.pairs[:count]
        return Known(count, [model for model, _turn in pairs], [turn for _model, turn in pairs], tenant, key, messages,
                     best)

    def keep(self, known: Known, models: list[ChatMessage], turns: list[Turn]) -> _Kept | None:
        """Keep a request's whole decoding (``models`` and ``turns``: one per message of
        ``known.raw``), up to its first message that is not plain; a list it extends is dropped.
        The list kept, if one is."""
        raw, kept, start = known.raw, known.kept, known.count
        if known.key is None or len(models) != len(raw) or len(turns) != len(raw):
            return None
        sizes = kept.sizes[:start] if kept is not None else []
        ordered = [(i, order) for i, order in kept.ordered if i < start] if kept is not None else []
        for message in raw[start:]:
            plain = plain_size(message)
            if plain is None:
                break
            if plain[1] is not None:
                ordered.append((len(sizes), plain[1]))
            sizes.append(plain[0])
        n = len(sizes)
        size = 3 * sum(sizes) + MESSAGE_OVERHEAD * n
        if n < self.min_messages or size > self.max_bytes or (kept is not None and n <= len(kept.raw)):
            return None
        entry = _Kept(known.tenant, known.key, raw[:n], list(zip(models[:n], turns[:n], strict=True)), sizes,
                      ordered, size)
        with self._filed.lock:
            if kept is not None and start == len(kept.raw) and self._filed.holds(kept):
                self._filed.drop(kept)  # every request it answers, this answers as well
            self._filed.add(entry, self.max_bytes)
        return entry


def _shared(kept: _Kept, messages: list[Any]) -> int:
    """How many first messages ``messages`` share with ``kept`` (equal, undeclared fields in the
    same order)."""
    def same(k: int) -> bool:
        return kept.raw[:k] == messages[:k] and all(list(messages[i]) == order for i, order in kept.ordered if i < k)

    high = min(len(kept.raw), len(messages))
    if same(high):
        return high
    low = 0  # same(low) holds, same(high) does not
    while high - low > 1:
        middle = (low + high) // 2
        if same(middle):
            low = middle
        else:
            high = middle
    return low
