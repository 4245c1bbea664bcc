"""A scripted raw-completion backend: a tiny HTTP/1.1 server of ours that streams a given
completion the way vLLM (``/v1/completions``), a generic OpenAI completions API, or llama-server
(``/completion``) does — and that can misbehave on purpose (error status, drop, stall, garbage).

Images, as the real ones take them: llama-server's ``/completion`` with a JSON-object prompt
(``prompt_string`` with one ``/props`` ``media_marker`` per ``multimodal_data`` item, refused when
the model has no vision, as llama-server refuses it), and vLLM's ``/v1/chat/completions`` with a
request ``chat_template`` (refused without ``--trust-request-chat-template``, as vLLM ≥ 0.11 does),
rendered with jinja2 the way vLLM renders a request template, streamed back as chat chunks.

It records every request body it receives and when each client connection went away. A response
can be held at a ``Gate`` (before its head, or after some pieces) until the test opens it: a test
that needs work still under way holds it there, rather than hoping a delay outlasts its checks. As a
llama-server it can also have a vocabulary of control tokens (``specials``): its ``/tokenize`` then
parses their strings into ids (``SPECIAL_ID + index``) unless told ``parse_special: false``, every
other byte is a token of its own, and ``evaluated(body)`` is the token list a generation request's
prompt — a string or a mix of strings and ids — is read as (with ``specials``, ``tokens_evaluated``
is its length).
"""

from __future__ import annotations

import asyncio
import base64
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import jinja2.sandbox


class Gate:
    """A point scripted responses stop at until the test opens it (``open()``; never: they stay
    held until their client leaves or the backend stops). ``reached`` is set once a response is
    there (a ``threading.Event`` the test can wait on)."""

    def __init__(self) -> None:
        self.reached = threading.Event()
        self._open = threading.Event()
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []
        self._lock = threading.Lock()

    @property
    def is_open(self) -> bool:
        return self._open.is_set()

    def open(self) -> None:
        with self._lock:
            self._open.set()
            for loop, event in self._waiters:
                loop.call_soon_threadsafe(event.set)

    async def wait(self) -> None:
        """Return once the gate is open (at once if it is)."""
        event = asyncio.Event()
        with self._lock:
            self.reached.set()
            if self._open.is_set():
                return
            self._waiters.append((asyncio.get_running_loop(), event))
        await event.wait()


@dataclass
class Script:
    """What the backend answers to one generation request."""

    pieces: list[str] = field(default_factory=lambda: ["Hello", "!"])
    finish: str = "stop"  # "stop" | "length"
    prompt_tokens: int = 7
    delay: float = 0.0  # seconds between pieces
    status: int = 200
    error_message: str = "backend says no"
    fault: str | None = None  # "drop" | "stall" | "garbage" | "bad_line" | "no_finish" | "error_event" | "raw"
    raw: bytes = b""  # what the "raw" fault sends (in chunks of at most 64 KiB), then the stream ends
    fault_after: int = 0  # pieces sent before the fault
    stall_seconds: float = 30.0
    connect_delay: float = 0.0  # seconds before the response head is sent
    hold: Gate | None = None  # where the response waits until the test opens it …
    hold_after: int | None = None  # … after this many pieces (None: before its head)
    stop_word: str | None = None  # the request's stop string that ended the output (finish "stop")
    #: when the request asks for logprobs (vLLM ``logprobs``, llama.cpp ``n_probs``): the logprob of each
    #: piece's tokens (default: -0.1 × (piece number + 1)); alternatives are "alt1", "alt2" … below it
    logprobs: list[float] | None = None
    #: the tokens reported with each piece (default: the piece is one token); lets a piece be several
    #: tokens (vLLM) or carry a token that has no text of its own yet (llama.cpp sends ``content: ""``)
    tokens: list[list[str]] | None = None
    #: vLLM with ``n`` > 1: each choice's script, streamed interleaved (default: this script for every choice)
    choices: list[Script] | None = None


#: the id of a llama-server ``specials`` string is this plus its index
SPECIAL_ID = 1_000_000


@dataclass
class Seen:
    path: str
    body: dict[str, Any]
    opened: float
    closed: float | None = None
    finished: float | None = None  # when the whole answer had been sent


class ScriptedBackend:
    def __init__(self, kind: str = "vllm", model: str = "scripted-model", chat_template: str | None = None,
                 bos_token: str = "", eos_token: str = "", adds_bos: bool = False, context: int | None = None,
                 tokenizer: bool = True, specials: list[str] | None = None,
                 media_marker: str | None = None, vision: bool | None = None,
                 trust_request_chat_template: bool = True) -> None:
        self.kind = kind
        #: llama-server control tokens (see the module docstring), and its ``/props`` ``media_marker``
        self.specials = list(specials or [])
        self.media_marker = media_marker
        #: llama-server: ``/props`` ``modalities.vision`` (``None``: no ``modalities`` field, as older servers)
        self.vision = vision
        #: vLLM: whether a request ``chat_template`` is accepted (``--trust-request-chat-template``)
        self.trust_request_chat_template = trust_request_chat_template
        #: what each image request carried: the prompt the backend tokenizes, and the images' bytes
        self.media_requests: list[tuple[str, list[bytes]]] = []
        #: ``False``: ``/tokenize`` answers 404, as a backend (or a gateway in front of one) without it
        self.tokenizer = tokenizer
        #: the context length it reports (llama-server ``/props`` ``n_ctx``, vLLM ``max_model_len``) and
        #: enforces as they do: vLLM refuses a prompt plus ``max_tokens`` beyond it, llama-server a
        #: prompt that fills it (prompt tokens are UTF-8 bytes, as ``/tokenize`` counts them)
        self.context = context
        self.model = model
        self.chat_template = chat_template
        self.bos_token = bos_token
        self.eos_token = eos_token
        self.adds_bos = adds_bos
        self.scripts: list[Script] = []
        self.default = Script()
        self.responder: Callable[[dict[str, Any]], Script] | None = None
        self.seen: list[Seen] = []
        self.tokenized: list[dict[str, Any]] = []  # bodies of /tokenize requests
        self.healthy = True
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.AbstractServer | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ control

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def script(self, *scripts: Script) -> None:
        """Answer the next generation requests with these scripts, in order (then the default)."""
        self.scripts.extend(scripts)

    def bodies(self) -> list[dict[str, Any]]:
        return [s.body for s in self.seen if s.path in ("/v1/completions", "/completion", "/v1/chat/completions")]

    # ------------------------------------------------------------------ tokens (llama-server)

    def tokenize(self, content: Any, parse_special: bool = True, add_special: bool = False) -> list[int]:
        """llama-server's ``tokenize_mixed``: strings tokenized (``specials`` parsed when asked, each
        other UTF-8 byte a token), ids kept; BOS first when the model adds one and the prompt opens
        with a string."""
        parts = content if isinstance(content, list) else [content]
        out: list[int] = []
        if add_special and self.adds_bos and parts and isinstance(parts[0], str):
            out.append(1)
        for part in parts:
            if isinstance(part, str):
                out.extend(self._tokenize_text(part, parse_special))
            else:
                out.append(int(part))
        return out

    def _tokenize_text(self, text: str, parse_special: bool) -> list[int]:
        if not parse_special or not self.specials:
            return list(text.encode())
        ordered = sorted(range(len(self.specials)), key=lambda i: -len(self.specials[i]))
        out: list[int] = []
        at = 0
        while at < len(text):
            hit = next((i for i in ordered if text.startswith(self.specials[i], at)), None)
            if hit is None:
                out.extend(text[at].encode())
                at += 1
            else:
                out.append(SPECIAL_ID + hit)
                at += len(self.specials[hit])
        return out

    def evaluated(self, body: dict[str, Any]) -> list[int]:
        """The tokens a ``/completion`` body's prompt is read as (a multimodal prompt: its string, with
        special tokens parsed, as llama-server reads it)."""
        prompt = body.get("prompt", "")
        if isinstance(prompt, dict):
            prompt = prompt.get("prompt_string", "")
        return self.tokenize(prompt, parse_special=True, add_special=True)

    def detokenize(self, tokens: list[int]) -> str:
        """Tokens back to text: control ids as their strings, the rest as UTF-8 bytes."""
        out = bytearray()
        for token in tokens:
            out += self.specials[token - SPECIAL_ID].encode() if token >= SPECIAL_ID else bytes([token])
        return out.decode("utf-8", "replace")

    def start(self) -> ScriptedBackend:
        ready = threading.Event()

        def run() -> None:
            self._loop = asyncio.new_event_loop()
            asyncio.set_event_loop(self._loop)
            self._server = self._loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", 0))
            self.port = self._server.sockets[0].getsockname()[1]
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()
        ready.wait(10)
        return self

    def stop(self) -> None:
        if self._loop is None:
            return

        async def shutdown() -> None:
            assert self._server is not None
            self._server.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.wait(tasks, timeout=2) if tasks else None  # let the handlers unwind

        asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(5)

    # ------------------------------------------------------------------ HTTP

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:] if ln)}
                length = int(headers.get("content-length", "0"))
                raw = await reader.readexactly(length) if length else b""
                body = json.loads(raw) if raw else {}
                keep = await self._route(method, path, body, reader, writer)
                if not keep:
                    break
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            try:
                writer.close()
            except RuntimeError:
                pass

    async def _send_json(self, writer: asyncio.StreamWriter, status: int, payload: Any) -> bool:
        data = json.dumps(payload).encode()
        writer.write(f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
                     .encode() + data)
        await writer.drain()
        return True

    async def _route(self, method: str, path: str, body: dict[str, Any], reader: asyncio.StreamReader,
                     writer: asyncio.StreamWriter) -> bool:
        if method == "GET" and path == "/health":
            return await self._send_json(writer, 200 if self.healthy else 503, {"status": "ok"})
        if method == "GET" and path == "/v1/models":
            owner = "vllm" if self.kind == "vllm" else ("llamacpp" if self.kind == "llamacpp" else "someone")
            model: dict[str, Any] = {"id": self.model, "object": "model", "owned_by": owner}
            if self.context and self.kind == "vllm":
                model["max_model_len"] = self.context
            return await self._send_json(writer, 200, {"object": "list", "data": [model]})
        if method == "GET" and path == "/props" and self.kind == "llamacpp":
            settings = {"n_ctx": self.context} if self.context else {}
            props: dict[str, Any] = {
                "default_generation_settings": settings, "chat_template": self.chat_template or "",
                "bos_token": self.bos_token, "eos_token": self.eos_token}
            if self.vision is not None:
                props["modalities"] = {"vision": self.vision, "video": False, "audio": False}
            if self.media_marker:
                props["media_marker"] = self.media_marker
            return await self._send_json(writer, 200, props)
        if method == "POST" and path == "/tokenize":  # one token per UTF-8 byte (and BOS where added)
            self.tokenized.append(body)
            if not self.tokenizer:
                return await self._send_json(writer, 404, {"detail": "Not Found"})
            if self.kind == "llamacpp":
                tokens = self.tokenize(body.get("content", ""), bool(body.get("parse_special", True)),
                                       bool(body.get("add_special")))
                return await self._send_json(writer, 200, {"tokens": tokens})
            if self.kind == "vllm":
                tokens = list(body.get("prompt", "").encode())
                return await self._send_json(writer, 200, {"count": len(tokens), "max_model_len": 32768,
                                                           "tokens": tokens})
        generation = {"vllm": "/v1/completions", "openai": "/v1/completions", "llamacpp": "/completion"}[self.kind]
        chat = self.kind == "vllm" and path == "/v1/chat/completions"
        if method == "POST" and (path in (generation, "/v1/completions") or chat):
            seen = Seen(path, body, time.monotonic())
            self.seen.append(seen)
            refusal = self._media_refusal(path, body) or self._beyond_context(path, body)
            if refusal is not None:
                return await self._send_json(writer, 400, {"error": {"message": refusal, "type": "BadRequestError"}})
            script = self.scripts.pop(0) if self.scripts else (self.responder(body) if self.responder else self.default)
            await self._stream(script, path, body, reader, writer, seen)
            return False
        return await self._send_json(writer, 404, {"error": {"message": "not found"}})

    def _media_refusal(self, path: str, body: dict[str, Any]) -> str | None:
        """An image request checked as the real backend checks it (its refusal, else ``None``; the
        prompt and images it carries are recorded in ``media_requests``)."""
        if path == "/completion" and isinstance(body.get("prompt"), dict):
            prompt = body["prompt"]
            if "multimodal_data" not in prompt:
                return None
            if not self.vision:
                return "Multimodal data provided, but model does not support multimodal requests."
            text, data = prompt.get("prompt_string"), prompt.get("multimodal_data")
            if not isinstance(text, str) or not isinstance(data, list):
                return "\"prompt\" elements must be a string, a list of tokens, a JSON object containing a prompt string"
            images = [base64.b64decode(item) for item in data]
            if text.count(self.media_marker or "<__media__>") != len(images):
                return "Failed to tokenize prompt"
            self.media_requests.append((text, images))
            return None
        if path != "/v1/chat/completions":
            return None
        if body.get("chat_template") is not None and not self.trust_request_chat_template:
            return "Chat template is passed with request, but --trust-request-chat-template is not set."
        messages = body.get("messages") or []
        images = [base64.b64decode(part["image_url"]["url"].split(",", 1)[1]) for m in messages
                  for part in (m.get("content") if isinstance(m.get("content"), list) else ())
                  if part.get("type") == "image_url"]
        shown = [{**m, "content": [{"type": "image"} if part.get("type") == "image_url" else part
                                   for part in m["content"]]} if isinstance(m.get("content"), list) else m
                 for m in messages]
        rendered = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True).from_string(
            body.get("chat_template") or self.chat_template or "").render(messages=shown)
        self.media_requests.append((rendered, images))
        return None

    def _beyond_context(self, path: str, body: dict[str, Any]) -> str | None:
        """The backend's refusal of a request its context cannot hold, in its words (``None``: it fits)."""
        if not self.context or not isinstance(body.get("prompt"), str):
            return None
        prompt = len(body["prompt"].encode())
        if path == "/completion":
            if prompt >= self.context:
                return f"request ({prompt} tokens) exceeds the available context size ({self.context} tokens)"
            return None
        wanted = body.get("max_tokens") or 0
        if prompt + wanted > self.context:
            return (f"This model's maximum context length is {self.context} tokens. However, you requested "
                    f"{prompt + wanted} tokens ({prompt} in the messages, {wanted} in the completion).")
        return None

    async def _stream(self, script: Script, path: str, body: dict[str, Any], reader: asyncio.StreamReader,
                      writer: asyncio.StreamWriter, seen: Seen) -> None:
        watcher = asyncio.ensure_future(reader.read(1))  # EOF = the client went away
        if script.connect_delay:
            try:  # a client that leaves during the delay is seen leaving
                await asyncio.wait_for(asyncio.shield(watcher), script.connect_delay)
                seen.closed = time.monotonic()
                return
            except TimeoutError:
                pass
        if script.hold is not None and script.hold_after is None and await self._held(script.hold, watcher):
            seen.closed = time.monotonic()
            return
        if script.status != 200:
            watcher.cancel()
            await self._send_json(writer, script.status, {"error": {"message": script.error_message,
                                                                     "type": "BadRequestError"}})
            return

        def closed() -> bool:
            return watcher.done()

        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
        llama = path == "/completion"
        try:
            n = body.get("n") or 1
            if not llama and n > 1:
                await self._stream_choices(script, body, n, writer, closed, watcher)
                return
            for i, piece in enumerate(script.pieces):
                if script.fault and i == script.fault_after:
                    await self._fault(script, writer)
                    return
                event = self._piece_event(llama, piece, i, script, body)
                await self._chunk(writer, event)
                if script.delay:
                    try:
                        await asyncio.wait_for(asyncio.shield(watcher), script.delay)
                    except TimeoutError:
                        pass
                if script.hold is not None and script.hold_after == i + 1:
                    await self._held(script.hold, watcher)
                if closed():
                    return
            if script.fault and script.fault_after >= len(script.pieces):
                await self._fault(script, writer)
                return
            for event in self._final_events(llama, script, len(script.pieces), body):
                await self._chunk(writer, event)
            writer.write(b"0\r\n\r\n")
            await writer.drain()
            seen.finished = time.monotonic()
        except (ConnectionError, RuntimeError):
            pass
        finally:
            if closed() or writer.is_closing():
                seen.closed = time.monotonic()
            else:
                try:
                    await asyncio.wait_for(asyncio.shield(watcher), 0.5)
                    seen.closed = time.monotonic()
                except TimeoutError:
                    pass
            watcher.cancel()

    @staticmethod
    async def _held(gate: Gate, watcher: asyncio.Future[bytes]) -> bool:
        """Wait at ``gate`` until it opens or the client leaves; whether the client left."""
        opened = asyncio.ensure_future(gate.wait())
        await asyncio.wait({opened, watcher}, return_when=asyncio.FIRST_COMPLETED)
        if not opened.done():
            opened.cancel()
        return watcher.done()

    async def _chunk(self, writer: asyncio.StreamWriter, data: bytes) -> None:
        writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        await writer.drain()

    async def _fault(self, script: Script, writer: asyncio.StreamWriter) -> None:
        if script.fault == "drop":
            writer.transport.abort()
        elif script.fault == "stall":
            await asyncio.sleep(script.stall_seconds)
        elif script.fault == "garbage":
            await self._chunk(writer, b"data: {not json at all\n\n")
        elif script.fault == "bad_line":
            await self._chunk(writer, b"data: [1, 2, 3]\n\n")
        elif script.fault == "error_event":
            await self._chunk(writer, b'data: {"error": {"message": "out of memory", "code": 500}}\n\n')
            writer.write(b"0\r\n\r\n")
            await writer.drain()
        elif script.fault == "raw":
            for at in range(0, len(script.raw), 1 << 16):
                await self._chunk(writer, script.raw[at:at + (1 << 16)])
            writer.write(b"0\r\n\r\n")
            await writer.drain()
        elif script.fault == "no_finish":
            writer.write(b"0\r\n\r\n")
            await writer.drain()

    def _piece_event(self, llama: bool, piece: str, i: int, script: Script, body: dict[str, Any],
                     index: int = 0) -> bytes:
        if "messages" in body:  # vLLM's chat endpoint
            return self._chat_event(body, {"content": piece}, i, script, index)
        tokens = script.tokens[i] if script.tokens is not None else [piece]
        logprob = script.logprobs[i] if script.logprobs is not None else round(-0.1 * (i + 1), 6)
        if llama:
            payload: dict[str, Any] = {"index": 0, "content": piece, "tokens": [i], "stop": False, "id_slot": 0,
                                       "tokens_predicted": i + 1, "tokens_evaluated": self._prompt_tokens(script, body)}
            top = body.get("n_probs") or 0
            if top:
                payload["completion_probabilities"] = [{
                    "id": i, "token": token, "bytes": list(token.encode()), "logprob": logprob,
                    "top_logprobs": [{"id": i, "token": token, "bytes": list(token.encode()), "logprob": logprob}]
                    + [{"id": 1000 + k, "token": f"alt{k}", "bytes": list(f"alt{k}".encode()), "logprob": logprob - k}
                       for k in range(1, top)]} for token in tokens]
        else:
            continuous = bool((body.get("stream_options") or {}).get("continuous_usage_stats"))
            usage = ({"prompt_tokens": script.prompt_tokens, "completion_tokens": i + 1,
                      "total_tokens": script.prompt_tokens + i + 1} if continuous else None)
            top = body.get("logprobs")
            logprobs = None if top is None else {  # vLLM: the sampled token and the top N (N + 1 entries)
                "tokens": tokens, "token_logprobs": [logprob] * len(tokens),
                "top_logprobs": [{token: logprob, **{f"alt{k}": logprob - k for k in range(1, top + 1)}}
                                 for token in tokens],
                "text_offset": [i] * len(tokens)}
            payload = {"id": "cmpl-scripted", "object": "text_completion", "created": 0, "model": self.model,
                       "choices": [{"index": index, "text": piece, "logprobs": logprobs, "finish_reason": None,
                                    "stop_reason": None}], "usage": usage}
        return b"data: " + json.dumps(payload).encode() + b"\n\n"

    async def _stream_choices(self, script: Script, body: dict[str, Any], n: int, writer: asyncio.StreamWriter,
                              closed: Callable[[], bool], watcher: asyncio.Future[bytes]) -> None:
        """vLLM's ``n`` > 1: the choices' pieces interleaved (piece i of choice 0, of choice 1, …), each
        choice's finish chunk right after its last piece, then the usage of all and ``[DONE]``."""
        scripts = script.choices or [script] * n
        scripts = (scripts * n)[:n]
        continuous = bool((body.get("stream_options") or {}).get("continuous_usage_stats"))
        for i in range(max(len(s.pieces) for s in scripts) + 1):
            for k, choice in enumerate(scripts):
                if i < len(choice.pieces):
                    await self._chunk(writer, self._piece_event(False, choice.pieces[i], i, choice, body, k))
                elif i == len(choice.pieces):
                    usage = ({"prompt_tokens": script.prompt_tokens, "completion_tokens": i,
                              "total_tokens": script.prompt_tokens + i} if continuous else None)
                    await self._chunk(writer, b"data: " + json.dumps({
                        "id": "cmpl-scripted", "object": "text_completion", "created": 0, "model": self.model,
                        "choices": [{"index": k, "text": "", "logprobs": None, "finish_reason": choice.finish,
                                     "stop_reason": choice.stop_word}], "usage": usage}).encode() + b"\n\n")
            if script.delay:
                try:
                    await asyncio.wait_for(asyncio.shield(watcher), script.delay)
                except TimeoutError:
                    pass
            if closed():
                return
        total = sum(len(s.pieces) for s in scripts)
        usage_event = {"id": "cmpl-scripted", "object": "text_completion", "created": 0, "model": self.model,
                       "choices": [], "usage": {"prompt_tokens": script.prompt_tokens, "completion_tokens": total,
                                                "total_tokens": script.prompt_tokens + total}}
        await self._chunk(writer, b"data: " + json.dumps(usage_event).encode() + b"\n\ndata: [DONE]\n\n")
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    def _chat_event(self, body: dict[str, Any], delta: dict[str, Any], i: int, script: Script, index: int = 0,
                    finish: str | None = None) -> bytes:
        """One chunk of vLLM's chat stream (``delta``; continuous usage when asked)."""
        continuous = bool((body.get("stream_options") or {}).get("continuous_usage_stats"))
        usage = ({"prompt_tokens": script.prompt_tokens, "completion_tokens": i + 1,
                  "total_tokens": script.prompt_tokens + i + 1} if continuous else None)
        logprobs = None
        if body.get("logprobs") and delta.get("content"):
            value = round(-0.1 * (i + 1), 6)
            logprobs = {"content": [{"token": delta["content"], "logprob": value, "bytes": None, "top_logprobs": [
                {"token": delta["content"], "logprob": value}]}]}
        payload = {"id": "chatcmpl-scripted", "object": "chat.completion.chunk", "created": 0, "model": self.model,
                   "choices": [{"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish,
                                "stop_reason": script.stop_word if finish else None}], "usage": usage}
        return b"data: " + json.dumps(payload).encode() + b"\n\n"

    def _prompt_tokens(self, script: Script, body: dict[str, Any]) -> int:
        return len(self.evaluated(body)) if self.specials else script.prompt_tokens

    def _final_events(self, llama: bool, script: Script, n: int, body: dict[str, Any] | None = None) -> list[bytes]:
        if body is not None and "messages" in body:  # vLLM's chat endpoint
            usage = {"id": "chatcmpl-scripted", "object": "chat.completion.chunk", "created": 0, "model": self.model,
                     "choices": [], "usage": {"prompt_tokens": script.prompt_tokens, "completion_tokens": n,
                                              "total_tokens": script.prompt_tokens + n}}
            return [self._chat_event({}, {}, n, script, finish=script.finish),
                    b"data: " + json.dumps(usage).encode() + b"\n\n", b"data: [DONE]\n\n"]
        if llama:
            stop_type = "limit" if script.finish == "length" else ("word" if script.stop_word else "eos")
            payload = {"index": 0, "content": "", "tokens": [], "stop": True, "id_slot": 0,
                       "stop_type": stop_type, "stopping_word": script.stop_word or "", "tokens_predicted": n,
                       "tokens_evaluated": self._prompt_tokens(script, body or {}), "timings": {"cache_n": 0, "prompt_n": 7}}
            return [b"data: " + json.dumps(payload).encode() + b"\n\n"]
        finish = {"id": "cmpl-scripted", "object": "text_completion", "created": 0, "model": self.model,
                  "choices": [{"index": 0, "text": "", "logprobs": None, "finish_reason": script.finish,
                               "stop_reason": script.stop_word}], "usage": None}
        usage = {"id": "cmpl-scripted", "object": "text_completion", "created": 0, "model": self.model,
                 "choices": [], "usage": {"prompt_tokens": script.prompt_tokens, "completion_tokens": n,
                                          "total_tokens": script.prompt_tokens + n}}
        return [b"data: " + json.dumps(finish).encode() + b"\n\n", b"data: " + json.dumps(usage).encode() + b"\n\n",
                b"data: [DONE]\n\n"]
