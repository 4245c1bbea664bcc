"""Parser events → Responses API output items: the SSE events of a streamed response, and the
response object itself.

One rule, ``ResponseItems``, decides the items for both answers, so they cannot disagree: items
come in the order the model wrote them — a run of reasoning is a ``reasoning`` item (its text as
``reasoning_text`` content; also as its summary when the request asked for one: toolwire does not
summarise), a run of content a ``message`` with one ``output_text`` part, each call a
``function_call`` (arguments as the model wrote them) or, for a custom tool, a ``custom_tool_call``
whose ``input`` is the string the model wrote (streamed decoded as it arrives). A text run of
nothing but whitespace makes no item.

With events on (streaming), every change is also written as the SSE event the ``openai`` SDK's
types define — ``response.output_item.added`` / ``.done``, ``response.content_part.added`` /
``.done``, ``response.output_text.delta`` / ``.done``, ``response.reasoning_text.delta`` /
``.done``, ``response.reasoning_summary_*``, ``response.function_call_arguments.delta`` / ``.done``,
``response.custom_tool_call_input.delta`` / ``.done`` — with ``sequence_number`` counting up from
0, and ``output_index`` / ``item_id`` / ``content_index`` consistent. A delta's envelope is encoded
once per item; a delta costs one ``orjson.dumps`` of its text.
"""

from __future__ import annotations

import re
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from app.api.blocks import CALL, REASONING, TEXT, Blocks
from app.api.responses.protocol import CUSTOM_INPUT, Offered, ResponsesRequest
from app.backends.generation import Usage
from app.errors import APIError, bad_request
from app.pipeline.run import Finished
from app.thinking_signature import ThinkingSigner
from parsers.events import CallStart, Event


def new_id(prefix: str) -> str:
    return prefix + secrets.token_hex(16)


def id_maker(most: int) -> Callable[[str], str]:
    """``new_id`` for up to ``most`` ids, from one read of the system's randomness (not one each:
    an input of hundreds of items lacking ids)."""
    pool = secrets.token_hex(16 * most)
    at = 0

    def make(prefix: str) -> str:
        nonlocal at
        made = prefix + pool[at:at + 32]
        at += 32
        return made

    return make


def new_call_id() -> str:
    return "call_" + secrets.token_urlsafe(18).replace("-", "a").replace("_", "b")


def usage_object(usage: Usage | None, reasoning_tokens: int) -> dict[str, Any]:
    u = usage or Usage()
    return {"input_tokens": u.prompt_tokens,
            "input_tokens_details": {"cached_tokens": u.cached_tokens or 0, "cache_write_tokens": 0},
            "output_tokens": u.completion_tokens,
            "output_tokens_details": {"reasoning_tokens": min(reasoning_tokens, u.completion_tokens)},
            "total_tokens": u.prompt_tokens + u.completion_tokens}


_INPUT_OPENING = re.compile(r'\s*\{\s*"' + CUSTOM_INPUT + r'"\s*:\s*"')
_OPENING_COMPACT = '{"' + CUSTOM_INPUT + '":"'
_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


class InputString:
    """The ``input`` string of a custom tool call, decoded from its JSON arguments as they stream
    (``{"input": "…"}`` — anything else is decoded whole at the end instead). Linear: each
    character is looked at once, a split escape is held until it completes."""

    __slots__ = ("_head", "_held", "_state")

    def __init__(self) -> None:
        self._head = ""  # arguments before the string opened
        self._held = ""  # an escape not complete yet
        self._state = 0  # 0: before the string, 1: inside it, 2: after it, -1: not the expected shape

    def feed(self, text: str) -> str:  # noqa: C901 — a JSON string decoder: one branch per escape kind, each character looked at once
        if self._state == 0:
            self._head += text
            match = _INPUT_OPENING.match(self._head)
            if match is None:
                compact = "".join(self._head.split())
                if len(self._head) > 64 or not _OPENING_COMPACT.startswith(compact):
                    self._state = -1
                return ""
            text, self._state, self._head = self._head[match.end():], 1, ""
        if self._state != 1:
            return ""
        text = self._held + text
        self._held = ""
        out: list[str] = []
        i, n = 0, len(text)
        while i < n:
            j = i
            while j < n and text[j] not in '"\\':
                j += 1
            out.append(text[i:j])
            if j == n:
                break
            if text[j] == '"':
                self._state = 2
                break
            if j + 1 >= n:
                self._held = text[j:]
                break
            c = text[j + 1]
            if c == "u":
                if j + 6 > n:
                    self._held = text[j:]
                    break
                code = int(text[j + 2:j + 6], 16) if re.fullmatch(r"[0-9a-fA-F]{4}", text[j + 2:j + 6]) else None
                if code is None:
                    self._state = -1
                    break
                if 0xD800 <= code < 0xDC00:  # a high surrogate: its pair follows
                    if j + 12 > n:
                        self._held = text[j:]
                        break
                    low = text[j + 6:j + 12]
                    if re.fullmatch(r"\\u[dD][c-fC-F][0-9a-fA-F]{2}", low):
                        code = 0x10000 + ((code - 0xD800) << 10) + (int(low[2:], 16) - 0xDC00)  # noqa: FURB166
                        out.append(chr(code))
                        i = j + 12
                        continue
                out.append(chr(code))
                i = j + 6
                continue
            if c not in _ESCAPES:
                self._state = -1
                break
            out.append(_ESCAPES[c])
            i = j + 2
        return "".join(out)

    @property
    def streamed(self) -> bool:
        """Whether the string was decoded as it streamed (else only the final value counts)."""
        return self._state == 2


def custom_input(arguments: str) -> str:
    """A custom tool call's input from its arguments: the ``input`` string, else the arguments."""
    try:
        value = orjson.loads(arguments) if arguments else {}
    except orjson.JSONDecodeError:
        return arguments
    text = value.get(CUSTOM_INPUT) if isinstance(value, dict) else None
    return text if isinstance(text, str) else arguments


_ITEM_KINDS = {TEXT: "message", REASONING: "reasoning", CALL: "call"}


def sse_event(kind: str, seq: int, payload: dict[str, Any]) -> bytes:
    """One event as its SSE frame: ``type`` and ``sequence_number`` first, then ``payload``."""
    return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps({"type": kind, "sequence_number": seq,
                                                                      **payload}) + b"\n\n"


class ResponseItems:
    """The items of one response and, with events on, their SSE events (a ``BlockWriter``:
    ``app.api.blocks`` decides where items open and close)."""

    def __init__(self, tools: dict[str, Offered], *, events: bool, summary: bool, encrypted: bool,
                 signer: ThinkingSigner) -> None:
        self.tools = tools
        self.emit = events
        self.summary = summary
        self.encrypted = encrypted
        self.signer = signer
        self.blocks = Blocks(self)
        self.items: list[dict[str, Any]] = []
        self.out: list[bytes] = []
        self.seq = 0
        self.parts: list[str] = []
        self._delta_head = b""
        self._summary_head = b""
        self._input: InputString | None = None
        self._input_head = b""

    @property
    def unfinished(self) -> int:
        return self.blocks.unfinished

    # ------------------------------------------------------------------ events

    def event(self, kind: str, payload: dict[str, Any]) -> None:
        if self.emit:
            self.out.append(sse_event(kind, self.seq, payload))
        self.seq += 1

    def _head(self, kind: str, fields: dict[str, Any]) -> bytes:
        """The bytes of a delta event of ``kind`` up to its sequence number."""
        inner = orjson.dumps({"type": kind, **fields})[:-1]
        return b"event: " + kind.encode() + b"\ndata: " + inner + b',"sequence_number":'

    def _delta(self, head: bytes, text: str) -> None:
        if self.emit:
            self.out.append(head + str(self.seq).encode() + b',"delta":' + orjson.dumps(text) + b"}\n\n")
        self.seq += 1

    def take(self) -> bytes:
        data = b"".join(self.out)
        self.out.clear()
        return data

    def fail(self, shell: dict[str, Any], output: list[dict[str, Any]], code: str, message: str) -> dict[str, Any]:
        """The response failed: its last two events (``failed_events``), and its response object."""
        data, failed = failed_events(self.seq, shell, output, code, message)
        if self.emit:
            self.out.append(data)
        self.seq += 2
        return failed

    # ------------------------------------------------------------------ blocks

    def feed(self, events: list[Event]) -> None:
        self.blocks.feed(events)

    def close(self, ok: bool = True) -> None:
        """Close the open item, if any."""
        self.blocks.close(ok)

    @property
    def index(self) -> int:
        return len(self.items) - 1

    def open_block(self, kind: str, call: CallStart | None) -> None:
        self.parts = []
        if call is not None:
            self._call_start(call)
        else:
            self._open_text(_ITEM_KINDS[kind])

    def write_block(self, kind: str, text: str, event: Event) -> None:
        self.parts.append(text)
        if kind == CALL:
            if self._input is None:
                self._delta(self._delta_head, text)
                return
            decoded = self._input.feed(text)
            if decoded:
                self._delta(self._input_head, decoded)
            return
        self._delta(self._delta_head, text)
        if kind == REASONING and self.summary:
            self._delta(self._summary_head, text)

    def _open_text(self, kind: str) -> None:
        index = len(self.items)
        if kind == "reasoning":
            item: dict[str, Any] = {"id": new_id("rs_"), "type": "reasoning", "summary": [], "content": [],
                                    "status": "in_progress"}
            self.items.append(item)
            self.event("response.output_item.added", {"output_index": index, "item": item})
            ids = {"item_id": item["id"], "output_index": index}
            if self.summary:
                self.event("response.reasoning_summary_part.added",
                           {**ids, "summary_index": 0, "part": {"type": "summary_text", "text": ""}})
                self._summary_head = self._head("response.reasoning_summary_text.delta", {**ids, "summary_index": 0})
            self.event("response.content_part.added",
                       {**ids, "content_index": 0, "part": {"type": "reasoning_text", "text": ""}})
            self._delta_head = self._head("response.reasoning_text.delta", {**ids, "content_index": 0})
        else:
            item = {"id": new_id("msg_"), "type": "message", "role": "assistant", "status": "in_progress",
                    "content": []}
            self.items.append(item)
            self.event("response.output_item.added", {"output_index": index, "item": item})
            ids = {"item_id": item["id"], "output_index": index}
            self.event("response.content_part.added", {**ids, "content_index": 0, "part": {
                "type": "output_text", "text": "", "annotations": [], "logprobs": []}})
            self._delta_head = self._head("response.output_text.delta", {**ids, "content_index": 0, "logprobs": []})

    def _call_start(self, e: CallStart) -> None:
        offered = self.tools.get(e.name) or Offered(e.name)
        index = len(self.items)
        call_id = e.id or new_call_id()
        if offered.custom:
            item: dict[str, Any] = {"id": new_id("ctc_"), "type": "custom_tool_call", "call_id": call_id,
                                    "name": offered.name, "input": "", "status": "in_progress"}
            self._input = InputString()
            self._input_head = self._head("response.custom_tool_call_input.delta",
                                          {"item_id": item["id"], "output_index": index})
        else:
            item = {"id": new_id("fc_"), "type": "function_call", "call_id": call_id, "name": offered.name,
                    "arguments": "", "status": "in_progress"}
            self._input = None
            self._delta_head = self._head("response.function_call_arguments.delta",
                                          {"item_id": item["id"], "output_index": index})
        if offered.namespace is not None:
            item["namespace"] = offered.namespace
        self.items.append(item)
        self.event("response.output_item.added", {"output_index": index, "item": item})

    def close_block(self, kind: str, ok: bool) -> None:
        item = self.items[-1]
        ids = {"item_id": item["id"], "output_index": self.index}
        text = "".join(self.parts)
        if kind == REASONING:
            self.event("response.reasoning_text.done", {**ids, "content_index": 0, "text": text})
            part: dict[str, Any] = {"type": "reasoning_text", "text": text}
            self.event("response.content_part.done", {**ids, "content_index": 0, "part": part})
            item["content"] = [part]
            if self.summary:
                summary = {"type": "summary_text", "text": text}
                self.event("response.reasoning_summary_text.done", {**ids, "summary_index": 0, "text": text})
                self.event("response.reasoning_summary_part.done", {**ids, "summary_index": 0, "part": summary})
                item["summary"] = [summary]
            if self.encrypted:
                item["encrypted_content"] = self.signer.seal(text)
        elif kind == TEXT:
            self.event("response.output_text.done", {**ids, "content_index": 0, "text": text, "logprobs": []})
            part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
            self.event("response.content_part.done", {**ids, "content_index": 0, "part": part})
            item["content"] = [part]
        elif item["type"] == "custom_tool_call":
            item["input"] = custom_input(text)
            self.event("response.custom_tool_call_input.done", {**ids, "input": item["input"]})
        else:
            item["arguments"] = text
            self.event("response.function_call_arguments.done", {**ids, "name": item["name"], "arguments": text})
        item["status"] = "completed" if ok else "incomplete"
        self.event("response.output_item.done", {"output_index": self.index, "item": item})
        self.parts = []


def shell(request: ResponsesRequest, response_id: str, model: str, conversation: str | None = None) -> dict[str, Any]:
    """The response object's fields that echo the request, before any output."""
    reasoning = request.reasoning.model_dump(exclude_none=True) if request.reasoning else {}
    return {
        "id": response_id, "object": "response", "created_at": int(time.time()), "status": "in_progress",
        "background": request.background is True, "error": None, "incomplete_details": None, "instructions": request.instructions,
        "max_output_tokens": request.max_output_tokens, "model": model, "output": [],
        "parallel_tool_calls": request.parallel_tool_calls is not False,
        "previous_response_id": request.previous_response_id,
        "reasoning": {"effort": reasoning.get("effort"), "summary": reasoning.get("summary")},
        "store": request.store is not False, "temperature": request.temperature,
        "text": {"format": (request.text.format if request.text and request.text.format else {"type": "text"})},
        "tool_choice": request.tool_choice if request.tool_choice is not None else "auto",
        "tools": request.tools or [], "top_p": request.top_p, "truncation": request.truncation or "disabled",
        "usage": None, "user": request.user, "metadata": request.metadata or {},
        "conversation": {"id": conversation} if conversation else None,
    }


def encoded_size(head: dict[str, Any], items: list[dict[str, Any]]) -> int:
    """The bytes the response object's echo of the request (``head``) and its input items take
    encoded; a 400 naming the first field that nests too deeply to be encoded (JSON is encoded up
    to 255 levels)."""
    try:
        return len(orjson.dumps(head)) + len(orjson.dumps(items))
    except orjson.JSONEncodeError:
        pass
    for key, value in [*head.items(), ("input", items)]:
        entries = enumerate(value) if isinstance(value, list) else [(None, value)]
        for i, entry in entries:
            try:
                orjson.dumps(entry)
            except orjson.JSONEncodeError:
                where, param = (key, key) if i is None else (f"{key}[{i}]", f"{key}.{i}")
                raise bad_request(f"{where} is nested too deeply (JSON objects and arrays nest at most 255 levels "
                                  "here)", param) from None
    raise bad_request("the request cannot be encoded as JSON")


def finished_output(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The items a final response object lists: every item but a call that never completed (cut
    off, or streamed in part and then malformed) — a stream showed it as it came, ``incomplete``,
    but no final object presents it as a call, so the streamed and the whole answer list the same."""
    return [item for item in items if not (item["type"] in _CALL_ITEMS and item["status"] == "incomplete")]


_CALL_ITEMS = frozenset({"function_call", "custom_tool_call"})


def finished_response(shell: dict[str, Any], items: ResponseItems, finished: Finished) -> dict[str, Any]:
    """The response object once the run is over (``shell`` holds what the request echoes)."""
    items.close()
    cut = finished.reason == "length" or items.unfinished > 0
    return {**shell, "status": "incomplete" if cut else "completed",
            "incomplete_details": {"reason": "max_output_tokens"} if cut else None,
            "completed_at": None if cut else int(time.time()),
            "output": finished_output(items.items), "usage": usage_object(finished.usage, finished.reasoning_tokens)}


def failed_response(shell: dict[str, Any], output: list[dict[str, Any]], message: str) -> dict[str, Any]:
    """The response object of a response that failed (``shell`` holds what the request echoes). Its
    error code is one of the API's own (``server_error``); the ``error`` event before it names the cause."""
    return {**shell, "status": "failed", "output": finished_output(output),
            "error": {"code": "server_error", "message": message}}


def error_event(seq: int, code: str, message: str) -> bytes:
    """An ``error`` event (number ``seq``) naming its cause (``code``)."""
    return sse_event("error", seq, {"code": code, "message": message, "param": None})


def failed_events(seq: int, shell: dict[str, Any], output: list[dict[str, Any]], code: str,
                  message: str) -> tuple[bytes, dict[str, Any]]:
    """The last two events of a failed response (from number ``seq``) — ``error`` naming the cause,
    ``response.failed`` — and its response object (``failed_response``)."""
    failed = failed_response(shell, output, message)
    return error_event(seq, code, message) + sse_event("response.failed", seq + 1, {"response": failed}), failed


class ResponseEvents:
    """The SSE ``Encoder`` (``app.pipeline.stream``) of one streamed response. ``save``, when given,
    stores the finished response before its last event leaves; it answers ``None``, or the error
    that kept it from storing — the stream then ends with ``error`` and ``response.failed`` (the
    output included), so the client knows the response cannot be continued or retrieved."""

    def __init__(self, shell: dict[str, Any], items: ResponseItems,
                 save: Callable[[dict[str, Any]], Awaitable[APIError | None]] | None = None) -> None:
        self.shell = shell
        self.items = items
        self.save = save

    def head(self) -> bytes:
        self.items.event("response.created", {"response": self.shell})
        self.items.event("response.in_progress", {"response": self.shell})
        return self.items.take()

    def events(self, index: int, events: list[Event]) -> bytes:
        self.items.feed(events)
        return self.items.take() if self.items.out else b""

    def end_choice(self, index: int, finished: Finished) -> bytes:
        return b""

    async def end(self, total: Finished) -> bytes:
        final = finished_response(self.shell, self.items, total)
        problem = await self.save(final) if self.save is not None else None
        if problem is not None:
            return self._failed(problem, final["output"])
        kind = "response.completed" if final["status"] == "completed" else "response.incomplete"
        self.items.event(kind, {"response": final})
        return self.items.take()

    def error(self, exc: APIError) -> bytes:
        self.items.close(ok=False)
        return self._failed(exc, self.items.items)

    def _failed(self, exc: APIError, output: list[dict[str, Any]]) -> bytes:
        self.items.fail(self.shell, output, exc.code or "server_error", exc.message)
        return self.items.take()
