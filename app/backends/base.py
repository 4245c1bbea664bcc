"""One async interface over raw-completion backends.

``Backend.generate(request)`` is an async iterator of ``TextDelta`` and, last, one ``Finish``
(finish reason and usage). Nothing is sent upstream until the first item is requested, and
errors before the first byte raise ``BackendError`` (mapped to 4xx/5xx by the HTTP layer); the
request is closed upstream as soon as the iterator is closed (client disconnect).
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import httpx
import orjson

from app.backends.dialect import BackendFacts, Dialect, Probe, Tokenizer
from app.backends.generation import Generation, GenerationRequest
from app.backends.streamhttp import (
    ConnectFailed,
    ConnectTimedOut,
    ReadTimedOut,
    StreamedResponse,
    StreamError,
    StreamingClient,
)
from app.constraints.tools import Constraint, ConstraintRequest
from app.errors import APIError, BackendError
from app.jsontext import body_pieces


def probe_timeout(client: httpx.AsyncClient) -> httpx.Timeout:
    """Timeouts for short probes: the configured connect timeout, 10 s to answer."""
    return httpx.Timeout(10.0, connect=client.timeout.connect)


class Backend:
    """One backend: its base URL, credentials and ``dialect`` (``app.backends.dialect``), and the
    I/O every dialect shares — the streaming loop, the readiness probe, the tokenizer exchange,
    error mapping. ``facts`` holds what the last ``probe()`` learned."""

    def __init__(self, base_url: str, client: httpx.AsyncClient, api_key: str | None = None,
                 model: str | None = None, streaming: StreamingClient | None = None,
                 dialect: Dialect | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.client = client  # probes, health, model names
        self.streaming = streaming or StreamingClient(client.timeout.connect or 10.0, client.timeout.read or 300.0)
        self.api_key = api_key
        self.model = model
        self.dialect = dialect if dialect is not None else Dialect()
        self.facts = BackendFacts()
        self._tokenizer_missing_until = -math.inf  # monotonic time: the tokenizer endpoint said "not found"

    def __getstate__(self) -> dict[str, Any]:
        """Pickled (to a prepare worker, which plans with it and never asks the backend anything)
        without its HTTP clients."""
        return {**self.__dict__, "client": None, "streaming": None}

    @property
    def kind(self) -> str:
        return self.dialect.kind

    @property
    def native_n(self) -> bool:
        """The backend generates ``n`` answers in one request (else toolwire sends ``n`` requests)."""
        return self.dialect.native_n

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def url(self, path: str) -> str:
        return self.base_url + path

    def constrain(self, request: ConstraintRequest) -> Constraint:
        """This backend's dialect of constrained decoding (``app.constraints.tools``)."""
        return self.dialect.constrain(request)

    async def generate(self, request: GenerationRequest) -> Generation:
        """The dialect's items for ``request``: text deltas as they arrive, then the finishes. The
        upstream request is closed when the iterator is (a stream whose last event was seen may
        keep its connection)."""
        decoder = self.dialect.decoder(request)
        decode = decoder.decode
        response = await self.open_stream(self.dialect.route(request), self.dialect.body(request, self.model))
        try:
            async for batch in self.sse_batches(response):
                for delta in decode(batch):
                    yield delta
                if decoder.stop:
                    break
        finally:
            await response.aclose(finished=decoder.complete)
        for finish in decoder.end():
            yield finish

    @property
    def counts_tokens(self) -> bool:
        """Whether ``count_tokens`` asks the backend: its dialect has a tokenizer endpoint, and that
        endpoint has not answered "not found" in the last ``TOKENIZER_RECHECK_SECONDS`` (a backend that
        lacks it would otherwise cost every request that needs a count a round trip)."""
        return self.dialect.tokenizer is not None and time.monotonic() >= self._tokenizer_missing_until

    async def count_tokens(self, prompt: str | Sequence[str | int]) -> int:
        """How many tokens ``prompt`` is, by the backend's own tokenizer (as it would count the prompt of
        a generation request; a list only for a dialect that takes mixed prompts); a clear 400 when the
        backend has no tokenizer endpoint."""
        tokenizer = self.dialect.tokenizer
        if tokenizer is None or not self.counts_tokens:
            raise APIError(400, f"this backend ({self.kind}) has no tokenizer endpoint to count tokens with",
                           code="count_tokens_unsupported")
        try:
            answer = await self._post_json(tokenizer.path, tokenizer_body(tokenizer, prompt, self.model,
                                                                          tokenizer.counting))
        except _NotFound as exc:
            self._tokenizer_missing_until = time.monotonic() + TOKENIZER_RECHECK_SECONDS
            raise BackendError(400, f"this backend ({self.kind}) has no tokenizer endpoint to count tokens with "
                               f"({tokenizer.path}: HTTP {exc.upstream})", code="count_tokens_unsupported",
                               kind="rejected") from exc
        return token_count(tokenizer, answer)

    async def tokenize(self, text: str, special: bool = False) -> list[int]:
        """``text``'s token ids, no BOS, by the backend's tokenizer: as plain text (its control-token
        strings not parsed: ``app.pipeline.literal``), or with them parsed (``special``: which strings
        are tokens of their own, ``app.vocab``) — for a dialect whose ``Tokenizer`` says how."""
        tokenizer = self.dialect.tokenizer
        fields = None if tokenizer is None else tokenizer.special if special else tokenizer.plain
        if tokenizer is None or fields is None:
            raise NotImplementedError(f"backend kind {self.kind!r} cannot tokenize without a BOS")
        return token_ids(tokenizer, await self._post_json(tokenizer.path, tokenizer_body(tokenizer, text, self.model,
                                                                                           fields)))

    async def mixed_prompt(self, text: str, regions: Sequence[tuple[int, int]]) -> list[str | int]:
        """``text`` as llama-server's mixed prompt: the stretches between ``regions`` as strings (it
        tokenizes them with their control strings parsed), each region as the ids of its plain-text
        tokenization (``tokenize``). It starts with a string (llama-server adds its BOS token only then)."""
        ids = await asyncio.gather(*(self.tokenize(text[a:b]) for a, b in regions))
        out: list[str | int] = []
        at = 0
        for (a, b), tokens in zip(regions, ids, strict=True):
            if a > at or not out:
                out.append(text[at:a])
            out.extend(tokens)
            at = b
        if at < len(text):
            out.append(text[at:])
        return out

    async def probe(self) -> BackendFacts:
        """Ask the backend what the dialect's ``probes`` name (an answer that fails or is not JSON
        counts as none) and keep what they say in ``facts``; the model id, when the backend gives
        one, becomes ``model``."""
        answers = {probe.name: await self._answer(probe) for probe in self.dialect.probes}
        self.facts = self.dialect.facts(answers)
        if self.facts.model:
            self.model = self.facts.model
        return self.facts

    async def _answer(self, probe: Probe) -> Any:
        timeout = probe_timeout(self.client)
        try:
            if probe.body is None:
                response = await self.client.get(self.url(probe.path), headers=self.headers, timeout=timeout)
            else:
                response = await self.client.post(self.url(probe.path), json=probe.body, headers=self.headers,
                                                  timeout=timeout)
            return response.json()
        except (httpx.HTTPError, ValueError):
            return None

    async def _post_json(self, path: str, body: dict[str, Any]) -> Any:
        """A short JSON POST to the backend (tokenizer and the like); failures as ``BackendError``."""
        try:
            response = await self.client.post(self.url(path), json=body, headers=self.headers,
                                              timeout=probe_timeout(self.client))
        except httpx.TimeoutException as exc:
            raise BackendError(504, f"backend timed out on {path}", code="backend_timeout", kind="read_timeout") from exc
        except httpx.HTTPError as exc:
            raise BackendError(503, f"backend unreachable: {self.base_url}", retryable=True,
                               code="backend_unreachable", kind="unreachable") from exc
        if response.status_code in NOT_FOUND:
            raise _NotFound(response.status_code, _status_error(response.status_code, response.content))
        if response.status_code >= 400:
            raise _status_error(response.status_code, response.content)
        try:
            return response.json()
        except ValueError as exc:
            raise BackendError(502, f"backend sent invalid JSON from {path}", kind="bad_json") from exc

    async def health(self) -> bool:
        try:
            response = await self.client.get(self.url("/health"), headers=self.headers, timeout=probe_timeout(self.client))
        except httpx.HTTPError:
            return False
        return response.status_code == 200

    async def open_stream(self, path: str, body: dict[str, Any]) -> StreamedResponse:
        """POST ``body`` and return the streaming response once its status is known to be OK."""
        try:
            response = await self.streaming.post(self.url(path), body_pieces(body), self.headers)
        except ConnectTimedOut as exc:
            raise BackendError(504, f"backend connect timeout: {self.base_url}", retryable=True,
                               code="backend_timeout", kind="connect_timeout") from exc
        except ConnectFailed as exc:
            raise BackendError(503, f"backend unreachable: {self.base_url}", retryable=True,
                               code="backend_unreachable", kind="unreachable") from exc
        except ReadTimedOut as exc:
            raise BackendError(504, "backend timed out before answering", code="backend_timeout",
                               kind="read_timeout") from exc
        except StreamError as exc:
            raise BackendError(502, f"backend request failed: {exc}", code="backend_error", kind="transport") from exc
        if response.status_code >= 400:
            try:
                raw = await response.aread()
            except StreamError:
                raw = b""
            finally:
                await response.aclose()
            raise _status_error(response.status_code, raw)
        return response

    async def sse_batches(self, response: StreamedResponse) -> AsyncIterator[list[dict[str, Any] | None]]:  # noqa: C901 — the SSE framing loop: line split, bound, batch and error mapping in one pass over the bytes
        """The JSON payloads of ``data:`` lines, a list per network read (``None`` for ``[DONE]``).

        Everything the backend sent in one read is handed on together, so when the proxy falls
        behind a fast backend it parses and writes fewer, larger pieces (adaptive batching); a
        lone event still goes out as soon as it arrives. Transport failures and garbage become
        ``BackendError``; so does a line longer than ``MAX_LINE`` bytes. Linear: a read is split
        once, and an unfinished line's pieces are joined only when its newline arrives."""
        pending: list[bytes] = []  # pieces of the line not finished yet
        pending_size = 0
        first = True
        try:
            async for raw in response.aiter_bytes():
                if b"\n" not in raw:
                    pending.append(raw)
                    pending_size += len(raw)
                    if pending_size > MAX_LINE:
                        raise BackendError(502, f"backend sent a line longer than {MAX_LINE} bytes", kind="bad_json")
                    continue
                lines = raw.split(b"\n")
                if pending:
                    lines[0] = b"".join(pending) + lines[0]
                    pending, pending_size = [], 0
                tail = lines.pop()
                if tail:
                    pending, pending_size = [tail], len(tail)
                batch: list[dict[str, Any] | None] = []
                try:
                    for line in lines:
                        event = _event(line)
                        if event is _SKIP:
                            continue
                        batch.append(event)
                        if first or len(batch) >= MAX_BATCH:  # the first token goes out alone, at once
                            first = False
                            yield batch
                            batch = []
                except BackendError:
                    if batch:  # what arrived before the bad event is still delivered first
                        yield batch
                    raise
                if batch:
                    yield batch
            rest = b"".join(pending)
            if rest.strip():
                event = _event(rest)
                if event is not _SKIP:
                    yield [event]
        except ReadTimedOut as exc:
            raise BackendError(504, "backend stopped sending (read timeout)", kind="read_timeout") from exc
        except StreamError as exc:
            raise BackendError(502, f"backend stream broke: {exc}", kind="dropped") from exc


_SKIP: Any = object()
NOT_FOUND = frozenset((404, 405, 501))  # statuses that say an endpoint does not exist (not that a request was bad)
TOKENIZER_RECHECK_SECONDS = 60.0  # how long a tokenizer endpoint that was not found is not asked again


class _NotFound(BackendError):
    """``_post_json``'s error for an endpoint the backend does not have (status ``upstream``)."""

    def __init__(self, upstream: int, error: BackendError) -> None:
        super().__init__(error.status, error.message, code=error.code, kind=error.kind)
        self.upstream = upstream


def tokenizer_body(tokenizer: Tokenizer, text: str | Sequence[str | int], model: str | None,
                   fields: Mapping[str, bool]) -> dict[str, Any]:
    """The JSON of a ``Tokenizer`` request: the model id where it names one, ``text``, ``fields``."""
    named = {"model": model} if tokenizer.names_model and model is not None else {}
    return {**named, tokenizer.text_field: text, **fields}


def token_count(tokenizer: Tokenizer, answer: Any) -> int:
    """The token count in a ``Tokenizer``'s JSON answer (``BackendError`` 502 when it has none)."""
    fields = answer if isinstance(answer, dict) else {}
    told = fields.get(tokenizer.count_field) if tokenizer.count_field is not None else None
    if isinstance(told, int):
        return told
    tokens = fields.get("tokens")
    if not isinstance(tokens, list):
        raise BackendError(502, f"backend {tokenizer.path} answered without {'a count' if tokenizer.count_field else 'tokens'}",
                           kind="bad_json")
    return len(tokens)


def token_ids(tokenizer: Tokenizer, answer: Any) -> list[int]:
    """The token ids in a ``Tokenizer``'s JSON answer (``BackendError`` 502 when it has none)."""
    tokens = answer.get("tokens") if isinstance(answer, dict) else None
    if not isinstance(tokens, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in tokens):
        raise BackendError(502, f"backend {tokenizer.path} answered without token ids", kind="bad_json")
    return tokens


MAX_BATCH = 64  # events handed on together at most (bounds the latency a burst adds)
MAX_LINE = 8 << 20  # longest SSE line accepted from a backend (one event; a token is a few bytes)


def _event(line: bytes) -> Any:
    """One SSE line: its JSON payload, ``None`` for ``[DONE]``, or ``_SKIP`` (blank, comment, other field)."""
    line = line.strip()
    if not line or line.startswith(b":"):
        return _SKIP
    if line.startswith(b"error:"):
        raise BackendError(502, f"backend error: {line[6:].strip()[:500].decode('utf-8', 'replace')}",
                           kind="stream_error")
    if not line.startswith(b"data:"):
        return _SKIP
    payload = line[5:].strip()
    if payload == b"[DONE]":
        return None
    try:
        data = orjson.loads(payload)
    except orjson.JSONDecodeError as exc:
        raise BackendError(502, "backend sent invalid JSON in its stream", kind="bad_json") from exc
    if not isinstance(data, dict):
        raise BackendError(502, "backend sent an unexpected stream event", kind="bad_json")
    if "error" in data:
        raise BackendError(502, f"backend error: {_message(data['error'])}", kind="stream_error")
    return data


def _message(error: Any) -> str:
    if isinstance(error, dict):
        return str(error.get("message") or error)[:500]
    return str(error)[:500]


def _status_error(status: int, raw: bytes) -> BackendError:
    try:
        message = _message(json.loads(raw).get("error") or json.loads(raw))
    except (ValueError, AttributeError):
        message = raw.decode("utf-8", "replace")[:500] or f"HTTP {status}"
    if status in (429, 503):
        return BackendError(503, f"backend busy: {message}", retryable=True, code="backend_busy", kind="busy")
    if 400 <= status < 500:
        return BackendError(400, message, code="backend_rejected", kind="rejected")
    return BackendError(502, f"backend error (HTTP {status}): {message}", code="backend_error", kind="http_5xx")
