"""Parser events → Anthropic content blocks: the SSE events of a streamed message, or one message.

The blocks are the shared rule's (``app.api.blocks``), so the two answers cannot disagree: a run
of reasoning is a ``thinking`` block, a run of content a ``text`` block, each call a ``tool_use``
block. A thinking block closes with its signature (``app.thinking_signature``);
with ``display: "omitted"`` its text is not shown, only sealed into the signature.

``MessageEvents`` (the ``Encoder`` of ``app.pipeline.stream``) writes the stream: ``message_start``
(usage with the prompt's tokens when the backend told them with the first token), then per block
``content_block_start``, ``content_block_delta`` (``thinking_delta``, ``text_delta``,
``input_json_delta`` with the arguments as the model writes them, ``signature_delta``) and
``content_block_stop``; then ``message_delta`` (stop reason, final usage) and ``message_stop``.
Envelope bytes are encoded once per block; a delta costs one ``orjson.dumps`` of its text.
``MessageBuilder`` folds the same events into the non-streaming ``message``.
"""

from __future__ import annotations

import secrets
import string
from typing import Any

import orjson

from app.api.blocks import CALL, REASONING, TEXT, Blocks
from app.api.messages.protocol import anthropic_error
from app.backends.generation import Usage
from app.errors import APIError
from app.pipeline.run import Finished
from app.thinking_signature import ThinkingSigner
from parsers.events import CallStart, Event

_ALPHABET = string.ascii_letters + string.digits

PING = b'event: ping\ndata: {"type":"ping"}\n\n'
MESSAGE_STOP = b'event: message_stop\ndata: {"type":"message_stop"}\n\n'


def _random_id(prefix: str) -> str:
    """``prefix`` and 24 random base-62 characters (the shape of Anthropic's ids)."""
    n = int.from_bytes(secrets.token_bytes(18), "big")
    digits = []
    for _ in range(24):
        n, r = divmod(n, 62)
        digits.append(_ALPHABET[r])
    return prefix + "".join(digits)


def new_message_id() -> str:
    return _random_id("msg_")


def new_tool_use_id() -> str:
    return _random_id("toolu_")


def event(name: str, payload: dict[str, Any]) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(payload) + b"\n\n"


def stop_reason(finished: Finished, unfinished_calls: int) -> tuple[str, str | None]:
    """``max_tokens`` when the output was cut (or a call shown in part never completed),
    ``tool_use`` when calls were made, ``stop_sequence`` (with the string) when one of the request's
    stop strings ended it, else ``end_turn``."""
    if finished.reason == "length" or unfinished_calls:
        return "max_tokens", None
    if finished.calls:
        return "tool_use", None
    if finished.stop_sequence is not None:
        return "stop_sequence", finished.stop_sequence
    return "end_turn", None


def usage_object(usage: Usage | None, prompt_tokens: int | None) -> dict[str, int]:
    """Anthropic's usage: prompt tokens read from the backend's prefix cache count as
    ``cache_read_input_tokens``, the rest as ``input_tokens`` (their sum is the prompt)."""
    if usage is None:
        return {"input_tokens": prompt_tokens or 0, "output_tokens": 0, "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 0}
    cached = min(usage.cached_tokens or 0, usage.prompt_tokens)
    return {"input_tokens": usage.prompt_tokens - cached, "output_tokens": usage.completion_tokens,
            "cache_creation_input_tokens": 0, "cache_read_input_tokens": cached}


_KINDS = {TEXT: "text", REASONING: "thinking", CALL: "tool_use"}


class _MessageBlocks:
    """What both message writers share (a ``BlockWriter``: ``app.api.blocks``): block numbering and
    thinking signatures — a shown thinking block is signed as it streams, an omitted one
    (``display: "omitted"``) sealed whole at its end."""

    def __init__(self, signer: ThinkingSigner, omit_thinking: bool) -> None:
        self.signer = signer
        self.omit_thinking = omit_thinking
        self.blocks = Blocks(self)
        self.index = -1  # the open block's index
        self._mac: Any = None  # running signature of a shown thinking block
        self._hidden: list[str] = []  # text of an omitted thinking block

    def open_block(self, kind: str, call: CallStart | None) -> None:
        self.index += 1
        if kind == REASONING:
            self._mac, self._hidden = (None, []) if self.omit_thinking else (self.signer.mac(), [])
        self._start(_KINDS[kind], call)

    def write_block(self, kind: str, text: str, event: Event) -> None:
        if kind == REASONING:
            if self.omit_thinking:
                self._hidden.append(text)
                return
            self._mac.update(text.encode())
        self._delta(text)

    def close_block(self, kind: str, ok: bool) -> None:
        signature = None
        if kind == REASONING:
            signature = (self.signer.seal("".join(self._hidden)) if self.omit_thinking
                         else self.signer.signature(self._mac))
        self._stop(signature)

    def _start(self, kind: str, call: CallStart | None) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def _delta(self, text: str) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def _stop(self, signature: str | None) -> None:  # pragma: no cover - interface
        raise NotImplementedError


_DELTA_TYPES = {"text": (b"text_delta", b"text"), "thinking": (b"thinking_delta", b"thinking"),
                "tool_use": (b"input_json_delta", b"partial_json")}


def _empty_block(kind: str, call: CallStart | None) -> dict[str, Any]:
    if call is not None:
        return {"type": "tool_use", "id": call.id or new_tool_use_id(), "name": call.name, "input": {}}
    if kind == "thinking":
        return {"type": "thinking", "thinking": "", "signature": ""}
    return {"type": "text", "text": ""}


class MessageEvents(_MessageBlocks):
    """The SSE ``Encoder`` (``app.pipeline.stream``) of one streamed message."""

    def __init__(self, message_id: str, model: str, signer: ThinkingSigner, omit_thinking: bool = False,
                 prompt_tokens: int | None = None) -> None:
        super().__init__(signer, omit_thinking)
        self.message_id = message_id
        self.model = model
        self.prompt_tokens = prompt_tokens
        self.out: list[bytes] = []
        self._prefix = b""
        self._suffix = b"}}\n\n"

    def head(self) -> bytes:
        return event("message_start", {"type": "message_start", "message": {
            "id": self.message_id, "type": "message", "role": "assistant", "model": self.model, "content": [],
            "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": self.prompt_tokens or 0, "output_tokens": 0, "cache_creation_input_tokens": 0,
                      "cache_read_input_tokens": 0}}})

    def _start(self, kind: str, call: CallStart | None) -> None:
        self.out.append(event("content_block_start", {"type": "content_block_start", "index": self.index,
                                                      "content_block": _empty_block(kind, call)}))
        delta_type, field = _DELTA_TYPES[kind]
        self._prefix = (b'event: content_block_delta\ndata: {"type":"content_block_delta","index":'
                        + str(self.index).encode() + b',"delta":{"type":"' + delta_type + b'","' + field + b'":')

    def _delta(self, text: str) -> None:
        self.out.append(self._prefix + orjson.dumps(text) + self._suffix)

    def _stop(self, signature: str | None) -> None:
        if signature is not None:
            self.out.append(event("content_block_delta", {"type": "content_block_delta", "index": self.index,
                                                          "delta": {"type": "signature_delta", "signature": signature}}))
        self.out.append(b'event: content_block_stop\ndata: {"type":"content_block_stop","index":'
                        + str(self.index).encode() + b"}\n\n")

    def _take(self) -> bytes:
        data = b"".join(self.out)
        self.out.clear()
        return data

    def events(self, index: int, events: list[Event]) -> bytes:
        self.blocks.feed(events)
        return self._take() if self.out else b""

    def end_choice(self, index: int, finished: Finished) -> bytes:
        return b""

    async def end(self, total: Finished) -> bytes:
        self.blocks.close()
        reason, sequence = stop_reason(total, self.blocks.unfinished)
        self.out.append(event("message_delta", {
            "type": "message_delta", "delta": {"stop_reason": reason, "stop_sequence": sequence},
            "usage": usage_object(total.usage, self.prompt_tokens)}))
        self.out.append(MESSAGE_STOP)
        return self._take()

    def error(self, exc: APIError) -> bytes:
        _, body = anthropic_error(exc)
        return self._take() + event("error", body)


class MessageBuilder(_MessageBlocks):
    """The same blocks, as the non-streaming message's ``content``."""

    def __init__(self, signer: ThinkingSigner, omit_thinking: bool = False) -> None:
        super().__init__(signer, omit_thinking)
        self.content: list[dict[str, Any]] = []
        self._parts: list[str] = []

    def feed(self, events: list[Event]) -> None:
        self.blocks.feed(events)

    def _start(self, kind: str, call: CallStart | None) -> None:
        self.content.append(_empty_block(kind, call))
        self._parts = []

    def _delta(self, text: str) -> None:
        self._parts.append(text)

    def _stop(self, signature: str | None) -> None:
        block = self.content[-1]
        text = "".join(self._parts)
        if block["type"] == "tool_use":
            block["input"] = _arguments(text)
        elif block["type"] == "thinking":
            block["thinking"] = text
            block["signature"] = signature or ""
        else:
            block["text"] = text

    def message(self, message_id: str, model: str, finished: Finished, prompt_tokens: int | None) -> dict[str, Any]:
        self.blocks.close()
        reason, sequence = stop_reason(finished, 0)
        return {"id": message_id, "type": "message", "role": "assistant", "model": model, "content": self.content,
                "stop_reason": reason, "stop_sequence": sequence, "usage": usage_object(finished.usage, prompt_tokens)}


def _arguments(text: str) -> dict[str, Any]:
    """A completed call's arguments as an object (the parsers guarantee one JSON object)."""
    if not text:
        return {}
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}
