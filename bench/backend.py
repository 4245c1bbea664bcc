"""A fast scripted backend: streams one fixed completion, as fast as it can, the way vLLM's
``POST /v1/completions`` does (``stream=true``), on loopback. HTTP/1.1 with keep-alive::

    data: {"id": "cmpl-bench", "object": "text_completion", …, "choices": [{"index": 0, "text": "<tool",
           "logprobs": null, "finish_reason": null, "stop_reason": null}], "usage": null}
    …
    data: {… "choices": [{"index": 0, "text": "", "finish_reason": "stop", …}], "usage": null}
    data: {… "choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": N, "total_tokens": …}}
    data: [DONE]

Every event is precomputed; one event per token, each written to the socket as it is sent (no
delay between tokens). Also answers ``GET /v1/models`` and ``GET /health`` (what toolwire probes).

Run as ``python -m bench.backend --tokens FILE.json [--pace-ms 5] [--record]`` (a JSON list of
token texts; ``--pace-ms`` spaces the tokens like a real model would; ``--record`` keeps each
prompt's SHA-256, handed over and forgotten by ``GET /bench/prompts``); it prints ``PORT <n>`` on
stdout once listening. Standard library only.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import sys

MODEL = "bench-model"


def sse_events(tokens: list[str], prompt_tokens: int = 12) -> list[bytes]:
    """The streamed response body, one HTTP chunk per SSE event (chunked transfer encoding)."""

    def chunk(payload: object) -> bytes:
        data = b"data: " + json.dumps(payload, ensure_ascii=False, separators=(", ", ": ")).encode() + b"\n\n"
        return f"{len(data):x}\r\n".encode() + data + b"\r\n"

    def text_event(text: str, finish: str | None) -> dict[str, object]:
        return {"id": "cmpl-bench", "object": "text_completion", "created": 0, "model": MODEL,
                "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish,
                             "stop_reason": None}], "usage": None}

    events = [chunk(text_event(t, None)) for t in tokens]
    events.append(chunk(text_event("", "stop")))
    events.append(chunk({"id": "cmpl-bench", "object": "text_completion", "created": 0, "model": MODEL,
                         "choices": [], "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": len(tokens),
                                                  "total_tokens": prompt_tokens + len(tokens)}}))
    done = b"data: [DONE]\n\n"
    events.append(f"{len(done):x}\r\n".encode() + done + b"\r\n")
    events.append(b"0\r\n\r\n")
    return events


STREAM_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


def json_response(payload: object) -> bytes:
    data = json.dumps(payload).encode()
    return (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " + str(len(data)).encode()
            + b"\r\n\r\n" + data)


MODELS = json_response({"object": "list", "data": [{"id": MODEL, "object": "model", "owned_by": "vllm"}]})
HEALTH = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"
NOT_FOUND = b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"


class FastBackend:
    def __init__(self, tokens: list[str], pace: float = 0.0, record: bool = False) -> None:
        self.events = sse_events(tokens)
        self.pace = pace  # seconds between tokens (0: as fast as possible)
        self.requests = 0
        self.record = record  # keep each prompt's SHA-256 (``GET /bench/prompts`` hands them over)
        self.prompts: list[str] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                request_line, _, rest = head.partition(b"\r\n")
                method, path, _ = request_line.split(b" ", 2)
                length = 0
                for line in rest.split(b"\r\n"):
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                body = await reader.readexactly(length) if length else b""
                if method == b"POST" and path == b"/v1/completions":
                    self.requests += 1
                    if self.record:
                        prompt = json.loads(body).get("prompt")
                        self.prompts.append(hashlib.sha256(json.dumps(prompt).encode()).hexdigest())
                    writer.write(STREAM_HEAD)
                    for event in self.events:
                        writer.write(event)
                        await writer.drain()
                        if self.pace:
                            await asyncio.sleep(self.pace)
                elif path == b"/bench/prompts":
                    writer.write(json_response(self.prompts))
                    self.prompts = []
                elif path == b"/v1/models":
                    writer.write(MODELS)
                elif path == b"/health":
                    writer.write(HEALTH)
                else:
                    writer.write(NOT_FOUND)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, ValueError):
            pass
        finally:
            writer.close()


async def serve(tokens: list[str], port: int, pace: float = 0.0, record: bool = False) -> None:
    backend = FastBackend(tokens, pace, record)
    server = await asyncio.start_server(backend.handle, "127.0.0.1", port, backlog=1024)
    print(f"PORT {server.sockets[0].getsockname()[1]}", flush=True)
    async with server:
        await server.serve_forever()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", required=True, help="JSON file: a list of token texts")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--pace-ms", type=float, default=0.0, help="pause between tokens (default: none)")
    parser.add_argument("--record", action="store_true", help="keep each prompt's SHA-256 for GET /bench/prompts")
    args = parser.parse_args(argv)
    with open(args.tokens, encoding="utf-8") as f:
        tokens = json.load(f)
    try:
        asyncio.run(serve(tokens, args.port, args.pace_ms / 1000, args.record))
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
