"""Parser events → OpenAI ``chat.completion.chunk`` objects and the final ``chat.completion``.

Chunk contract (DESIGN.md, and the real OpenAI captures in tests/data/openai-stream): the first
chunk carries ``role``; each tool call opens with one delta holding ``index``, ``id``, ``type``,
``name`` and ``arguments: ""``, then argument fragments carry only ``index`` and ``arguments``;
the chunk that ends the choice has an empty delta and ``finish_reason``; with
``stream_options.include_usage`` every chunk has ``usage: null`` and one last chunk with
``choices: []`` carries the usage. With ``n`` > 1 each choice streams with its own ``index`` and
ends with its own finish chunk; the usage chunk (the sum over the choices) and ``[DONE]`` follow the
last. With ``logprobs``, a content chunk's ``logprobs.content`` lists the tokens whose text it is
the first to show (``app.pipeline.logprobs``); every other chunk has ``logprobs: null``.
"""

from __future__ import annotations

import secrets
import string
import time
from typing import Any

import orjson

from app.api.blocks import REASONING, TEXT, Blocks
from app.backends.generation import Usage
from app.errors import APIError
from app.pipeline.logprobs import LoggedContent
from app.pipeline.run import Finished
from parsers.events import CallArgs, CallStart, Event
from parsers.fold import FoldedMessage

_ALPHABET = string.ascii_letters + string.digits


def new_call_id() -> str:
    """``call_`` and 24 random base-62 characters (OpenAI's shape), from 144 random bits."""
    n = int.from_bytes(secrets.token_bytes(18), "big")
    digits = []
    for _ in range(24):
        n, r = divmod(n, 62)
        digits.append(_ALPHABET[r])
    return "call_" + "".join(digits)


def new_completion_id() -> str:
    return "chatcmpl-" + secrets.token_hex(16)


def sse(payload: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(payload) + b"\n\n"


SSE_DONE = b"data: [DONE]\n\n"


def reasoning_fields(text: str, mode: str) -> dict[str, str]:
    if mode == "both":
        return {"reasoning_content": text, "reasoning": text}
    return {mode: text}


class ChunkWriter:
    """Encodes one streamed choice (a ``BlockWriter``: ``app.api.blocks``)."""

    def __init__(self, completion_id: str, model: str, reasoning_field: str = "reasoning_content",
                 include_usage: bool = False, named_tool: bool = False, created: int | None = None,
                 index: int = 0) -> None:
        self.reasoning_field = reasoning_field
        self.named_tool = named_tool  # a named tool_choice keeps finish_reason "stop"
        self.blocks = Blocks(self, skip_blank=False)
        self.out: list[bytes] = []
        # every chunk of a stream shares its envelope: encode it once, around a placeholder delta
        envelope: dict[str, Any] = {
            "id": completion_id, "object": "chat.completion.chunk",
            "created": int(time.time()) if created is None else created,
            "model": model, "system_fingerprint": None,
            "choices": [{"index": index, "delta": 0, "logprobs": None, "finish_reason": None}],
        }
        if include_usage:
            envelope["usage"] = None
        head, _, tail = orjson.dumps(envelope).partition(b'"delta":0')
        self._head = b"data: " + head + b'"delta":'
        self._tail = tail + b"\n\n"

    def _chunk(self, delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
        if finish_reason is None:
            return self._head + orjson.dumps(delta) + self._tail
        tail = self._tail.replace(b'"finish_reason":null', b'"finish_reason":' + orjson.dumps(finish_reason), 1)
        return self._head + orjson.dumps(delta) + tail

    def head(self) -> bytes:
        """The role chunk that opens the stream."""
        return self._chunk({"role": "assistant", "content": None})

    # ------------------------------------------------------------------ blocks

    def open_block(self, kind: str, call: CallStart | None) -> None:
        if call is not None:
            self.out.append(self._chunk({"tool_calls": [{
                "index": call.index, "id": call.id or new_call_id(), "type": "function",
                "function": {"name": call.name, "arguments": ""},
            }]}))

    def write_block(self, kind: str, text: str, event: Event) -> None:
        if kind == TEXT:
            if type(event) is LoggedContent:
                logprobs = orjson.dumps({"content": event.logprobs, "refusal": None})
                tail = self._tail.replace(b'"logprobs":null', b'"logprobs":' + logprobs, 1)
                self.out.append(self._head + orjson.dumps({"content": text}) + tail)
            else:
                self.out.append(self._chunk({"content": text}))
        elif kind == REASONING:
            self.out.append(self._chunk(reasoning_fields(text, self.reasoning_field)))
        else:
            assert isinstance(event, CallArgs)
            self.out.append(self._chunk({"tool_calls": [{"index": event.index, "function": {"arguments": text}}]}))

    def close_block(self, kind: str, ok: bool) -> None:
        pass  # a chunk stream has no block ends: the call's last fragment ends it

    # ------------------------------------------------------------------ the stream

    def events(self, events: list[Event]) -> bytes:
        self.blocks.feed(events)
        if not self.out:
            return b""
        data = b"".join(self.out)
        self.out.clear()
        return data

    def end(self, finished: Finished) -> bytes:
        """The chunk that ends the choice."""
        reason = finish_reason(finished.reason, self.blocks.calls, self.blocks.unfinished, self.named_tool)
        return self._chunk({}, reason)


class ChoiceChunks:
    """Encodes a stream of ``n`` choices (an ``app.pipeline.stream.Encoder``): one ``ChunkWriter``
    per choice, then the usage chunk when asked for and ``[DONE]``."""

    def __init__(self, completion_id: str, model: str, n: int = 1, reasoning_field: str = "reasoning_content",
                 include_usage: bool = False, named_tool: bool = False) -> None:
        self.created = int(time.time())
        self.completion_id = completion_id
        self.model = model
        self.include_usage = include_usage
        self.writers = [ChunkWriter(completion_id, model, reasoning_field, include_usage, named_tool, self.created, k)
                        for k in range(n)]

    def head(self) -> bytes:
        """The role chunk of every choice, which opens the stream."""
        return b"".join(writer.head() for writer in self.writers)

    def events(self, index: int, events: list[Event]) -> bytes:
        return self.writers[index].events(events)

    def end_choice(self, index: int, finished: Finished) -> bytes:
        return self.writers[index].end(finished)

    async def end(self, total: Finished) -> bytes:
        """After the last choice: the usage chunk when asked for, then ``[DONE]``."""
        if self.include_usage:
            return self.usage(total.usage, total.reasoning_tokens) + SSE_DONE
        return SSE_DONE

    def error(self, exc: APIError) -> bytes:
        return sse(exc.body())

    def usage(self, usage: Usage | None, reasoning_tokens: int = 0) -> bytes:
        return sse({
            "id": self.completion_id, "object": "chat.completion.chunk", "created": self.created,
            "model": self.model, "system_fingerprint": None, "choices": [],
            "usage": (usage or Usage()).as_openai(reasoning_tokens),
        })


def finish_reason(backend_reason: str, calls: int, unfinished: int, named_tool: bool) -> str:
    """``length`` when output was cut (or a partial call was shown), ``tool_calls`` when calls
    were made (a named ``tool_choice`` keeps ``stop``), else the backend's reason."""
    if backend_reason == "length" or unfinished:
        return "length"
    if calls and not named_tool:
        return "tool_calls"
    return backend_reason


def choice_object(index: int, message: FoldedMessage, reason: str, reasoning_field: str,
                  logprobs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """One choice of the non-streaming ``chat.completion`` (``logprobs``: its content tokens' entries,
    when asked for)."""
    body: dict[str, Any] = {"role": "assistant", "content": message.content or None}
    if message.reasoning:
        body.update(reasoning_fields(message.reasoning, reasoning_field))
    if message.calls:
        body["tool_calls"] = [
            {"id": call.id or new_call_id(), "type": "function",
             "function": {"name": call.name, "arguments": call.arguments}}
            for call in message.calls
        ]
    return {"index": index, "message": body,
            "logprobs": None if logprobs is None else {"content": logprobs, "refusal": None},
            "finish_reason": reason}


def completion_object(completion_id: str, model: str, choices: list[dict[str, Any]], usage: Usage | None,
                      reasoning_tokens: int = 0) -> dict[str, Any]:
    """The non-streaming ``chat.completion``."""
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "system_fingerprint": None,
        "choices": choices,
        "usage": (usage or Usage()).as_openai(reasoning_tokens),
    }
