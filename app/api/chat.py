"""``POST /v1/chat/completions``: validate → render → generate → parse → encode.

Streaming and non-streaming requests run the same pipeline (the non-streaming answer is the fold
of the same events), so the two cannot disagree.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import orjson
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from app.api.chat_chunks import SSE_DONE, ChunkWriter, completion_object, finish_reason, new_completion_id, sse
from app.api.chat_protocol import ChatCompletionRequest, NamedToolChoice
from app.api.sse import SSEResponse
from app.backends import Backend, Finish, GenerationRequest, Sampling, TextDelta
from app.backends.base import Generation
from app.constraints.tools import Constraint, ReasoningGate, build_constraint
from app.conversation import Call, Turn
from app.errors import APIError, BackendError, bad_request
from app.runtime import Runtime, render_error
from app.templates.chat_template import TemplateError
from app.templates.prompt import CallText, json_call_text, render_conversation
from detectors.tools.constrained import JsonCallArray, NamedArguments
from parsers import FunctionCallParser, ResponseParser, build_response_parser, fold, to_specs
from parsers.events import CallEnd, Event
from parsers.fold import CallHolder, CallLimit
from parsers.registry import reasoning_detector_class, tool_detector_class
from parsers.tools import ToolSpec

log = logging.getLogger("toolwire")


def validation_message(exc: ValidationError) -> tuple[str, str | None]:
    """The first validation problem as ``(message, param)``."""
    error = exc.errors()[0]
    loc = ".".join(str(p) for p in error.get("loc", ()) if not isinstance(p, str) or not p.startswith("function-"))
    msg = error.get("msg", "invalid value")
    return (f"{loc}: {msg}" if loc else msg), (loc or None)


@lru_cache(maxsize=4096)
def schema_problem(encoded: bytes) -> str | None:
    """Why a tool's JSON schema (canonical JSON text) is invalid, or ``None``. Cached: agents send
    the same tools with every request, and checking a schema costs far more than hashing it."""
    try:
        Draft202012Validator.check_schema(orjson.loads(encoded))
    except SchemaError as exc:
        return exc.message
    return None


def parse_request(body: Any, runtime: Runtime) -> ChatCompletionRequest:
    if not isinstance(body, dict):
        raise bad_request("request body must be a JSON object")
    try:
        request = ChatCompletionRequest.model_validate(body)
    except ValidationError as exc:
        message, param = validation_message(exc)
        raise bad_request(message, param) from None
    s = runtime.settings
    if len(request.messages) > s.max_messages:
        raise bad_request(f"too many messages ({len(request.messages)} > {s.max_messages})", "messages")
    if request.tools:
        if len(request.tools) > s.max_tools:
            raise bad_request(f"too many tools ({len(request.tools)} > {s.max_tools})", "tools")
        for i, tool in enumerate(request.tools):
            schema = tool.function.parameters
            if schema is None:
                continue
            encoded = orjson.dumps(schema, option=orjson.OPT_SORT_KEYS)
            if len(encoded) > s.max_tool_schema_bytes:
                raise bad_request(f"tools[{i}].function.parameters is larger than {s.max_tool_schema_bytes} bytes",
                                  f"tools.{i}.function.parameters")
            problem = schema_problem(encoded)
            if problem is not None:
                raise bad_request(f"tools[{i}].function.parameters is not a valid JSON schema: {problem}",
                                  f"tools.{i}.function.parameters")
    choice = request.tool_choice
    if choice == "required" and not request.tools:
        raise bad_request('tool_choice "required" needs tools', "tool_choice")
    if isinstance(choice, NamedToolChoice):
        names = [t.function.name for t in request.tools or []]
        if choice.function.name not in names:
            raise bad_request(f"tool_choice names {choice.function.name!r}, which is not in tools", "tool_choice")
    if s.max_tokens_cap and request.token_limit and request.token_limit > s.max_tokens_cap:
        raise bad_request(f"max_tokens exceeds this server's cap of {s.max_tokens_cap}", "max_tokens")
    return request


@dataclass
class ChatPlan:
    request: ChatCompletionRequest
    prompt: str
    tools: list[dict[str, Any]]  # offered to the model (rendered)
    specs: tuple[ToolSpec, ...]  # the same tools, normalised once for the constraint and the parser
    parse_tools: bool
    named_tool: str | None
    constraint: Constraint


_KNOWN_MESSAGE_FIELDS = frozenset({"reasoning_content", "reasoning", "thinking"})


def chat_turns(request: ChatCompletionRequest) -> list[Turn]:
    """The request's messages as the shared conversation (``app.conversation``)."""
    turns = []
    for i, message in enumerate(request.messages):
        try:
            text = message.text_content() or ""
        except ValueError as exc:
            raise bad_request(f"messages[{i}].content: {exc}", f"messages.{i}.content") from None
        extra = {k: v for k, v in (message.model_extra or {}).items() if k not in _KNOWN_MESSAGE_FIELDS}
        role = "system" if message.role == "developer" else message.role
        if role == "assistant":
            calls = tuple(Call(call.id or f"call_{i}_{k}", call.function.name, call.function.arguments)
                          for k, call in enumerate(message.tool_calls or ()))
            reasoning = message.reasoning_content if message.reasoning_content is not None else message.reasoning
            if reasoning is None and isinstance((message.model_extra or {}).get("thinking"), str):
                reasoning = message.model_extra["thinking"]  # type: ignore[index]
            turns.append(Turn("assistant", text, calls, reasoning, name=message.name, extra=extra))
        else:
            turns.append(Turn(role, text, tool_call_id=message.tool_call_id, name=message.name, extra=extra))
    return turns


def call_text_for(runtime: Runtime) -> CallText:
    """How earlier calls are written into a prompt whose template does not render them: in the
    active tool format's own wire format, else as JSON lines."""
    parser = runtime.parsers.tools
    wire = tool_detector_class(parser).wire if parser else None
    if wire is None:
        return json_call_text

    def write(calls: Sequence[Call]) -> str:
        rendered = []
        for call in calls:
            arguments = call.arguments
            if isinstance(arguments, str):
                try:
                    arguments = orjson.loads(arguments)
                except orjson.JSONDecodeError:
                    arguments = {}
            rendered.append((call.name, arguments if isinstance(arguments, Mapping) else {}))
        return wire.render(rendered)

    return write


def plan_chat(request: ChatCompletionRequest, runtime: Runtime) -> ChatPlan:
    choice = request.tool_choice
    named = choice.function.name if isinstance(choice, NamedToolChoice) else None
    tools: list[dict[str, Any]] = []
    if request.tools and choice != "none":
        tools = [t.model_dump(exclude_none=True) for t in request.tools]
        if named:
            tools = [t for t in tools if t["function"]["name"] == named]
    turns = chat_turns(request)
    kwargs: dict[str, Any] = dict(request.chat_template_kwargs or {})
    if request.reasoning_effort is not None:
        kwargs.setdefault("reasoning_effort", request.reasoning_effort)
    template = runtime.require_template()
    try:
        prompt = render_conversation(template, turns, tools or None, call_text_for(runtime), **kwargs)
    except TemplateError as exc:
        raise render_error(exc) from None
    backend = runtime.backend
    if backend is not None and getattr(backend, "adds_bos", False) and template.bos_token \
            and prompt.startswith(template.bos_token):
        prompt = prompt[len(template.bos_token):]  # the backend adds its own BOS token
    specs = to_specs(tools)
    constraint = plan_constraint(request, runtime, prompt, specs, named)
    parse_tools = bool(tools) and (runtime.parsers.tools is not None or constraint.output != "wire")
    return ChatPlan(request, prompt, tools, specs, parse_tools, named, constraint)


def plan_constraint(request: ChatCompletionRequest, runtime: Runtime, prompt: str, specs: tuple[ToolSpec, ...],
                    named: str | None) -> Constraint:
    """What the backend is told to constrain (see ``app.constraints.tools``)."""
    wire = tool_detector_class(runtime.parsers.tools).wire if runtime.parsers.tools else None
    gate = None
    if runtime.parsers.reasoning:
        detector = reasoning_detector_class(runtime.parsers.reasoning)()
        inside = detector.initial_state(prompt)
        gate = ReasoningGate.of(detector, detector.force_reasoning if inside is None else inside)
    choice = request.tool_choice if isinstance(request.tool_choice, str) else None
    response_format = request.response_format.model_dump(exclude_none=True) if request.response_format else None
    kind = runtime.backend.kind if runtime.backend is not None else "openai"
    return build_constraint(kind, choice, named, specs, wire, request.parallel_tool_calls is not False, gate,
                            response_format, runtime.settings.vllm_legacy_guided)


def build_parser(plan: ChatPlan, runtime: Runtime) -> ResponseParser:
    output = plan.constraint.output
    if plan.parse_tools and output != "wire":  # the backend writes JSON, not the model's own format
        specs = plan.specs
        detector = JsonCallArray(specs) if output == "json_array" else NamedArguments(specs, plan.named_tool or "")
        return ResponseParser(None, FunctionCallParser(specs, detector=detector))
    tool_parser = runtime.parsers.tools if plan.parse_tools else None
    return build_response_parser(plan.specs, tool_parser, runtime.parsers.reasoning, plan.prompt)


def event_filters(plan: ChatPlan, hold: bool) -> list[Any]:
    """Post-parse filters: at most ``max_calls`` calls; calls held until complete."""
    filters: list[Any] = []
    if plan.constraint.max_calls is not None:
        filters.append(CallLimit(plan.constraint.max_calls))
    if hold:
        filters.append(CallHolder())
    return filters


def generation_request(plan: ChatPlan, runtime: Runtime) -> GenerationRequest:
    r = plan.request
    sampling = Sampling(
        max_tokens=r.token_limit, temperature=r.temperature, top_p=r.top_p, top_k=r.top_k, min_p=r.min_p,
        stop=list(r.stop or []), seed=r.seed, presence_penalty=r.presence_penalty,
        frequency_penalty=r.frequency_penalty, repetition_penalty=r.repetition_penalty,
    )
    return GenerationRequest(plan.prompt, sampling, runtime.marker_tokens(plan.parse_tools), plan.constraint.fields)


async def start_generation(backend: Backend, request: GenerationRequest, retries: int) -> tuple[Any, Generation]:
    """Open the backend stream and wait for its first item; retry (bounded, with backoff) only
    errors that happen before anything was generated and are safe to repeat."""
    delay = 0.2
    for attempt in range(retries + 1):
        stream = backend.generate(request)
        try:
            first = await stream.__anext__()
            return first, stream
        except BackendError as exc:
            await stream.aclose()
            if exc.retryable and attempt < retries:
                await asyncio.sleep(delay)
                delay *= 2
                continue
            raise
        except StopAsyncIteration:
            raise BackendError(502, "backend returned an empty stream", kind="dropped") from None
    raise AssertionError("unreachable")


@dataclass
class RequestScope:
    """What the HTTP layer hands a request: the Starlette request (to watch for disconnects),
    when it started, and how to give back its concurrency slot (exactly once, when the response
    is over — for a stream, when the stream ends)."""

    request: Request | None = None
    started: float = field(default_factory=time.monotonic)
    release: Callable[[], None] = lambda: None


class ParseTally:
    """Counts parse outcomes for the metrics (a pass-through event filter)."""

    __slots__ = ("calls", "unfinished")

    def __init__(self) -> None:
        self.calls = self.unfinished = 0

    def __call__(self, events: list[Event]) -> list[Event]:
        for event in events:
            if isinstance(event, CallEnd):
                if event.ok:
                    self.calls += 1
                elif not event.raw:
                    self.unfinished += 1
        return events

    def record(self, runtime: Runtime, plan: ChatPlan, parser: ResponseParser) -> None:
        detector = detector_label(runtime, plan)
        events = runtime.metrics.parse_events
        tools = parser.tools
        for name, count in (("tool_call", self.calls), ("unfinished_call", self.unfinished),
                            ("malformed_passthrough", tools.malformed_calls if tools else 0),
                            ("unknown_tool", tools.unknown_tool_names if tools else 0)):
            if count:
                events.labels(detector, name).inc(count)


def detector_label(runtime: Runtime, plan: ChatPlan) -> str:
    if plan.constraint.output != "wire" and plan.parse_tools:
        return plan.constraint.output
    parser = runtime.parsers.tools if plan.parse_tools else None
    if parser is None:
        return "none"
    return parser if isinstance(parser, str) else str(getattr(parser, "label", parser.__name__))


async def chat_completions(body: Any, runtime: Runtime, scope: RequestScope | None = None) -> Response:
    scope = scope or RequestScope()
    try:
        request = parse_request(body, runtime)
        backend = await runtime.ready_backend()
        plan = plan_chat(request, runtime)
        parser = build_parser(plan, runtime)
        if runtime.settings.log_content:
            log.debug("prompt", extra={"fields": {"prompt": plan.prompt}})
        try:
            first, stream = await start_generation(backend, generation_request(plan, runtime),
                                                   runtime.settings.retries)
        except BackendError as exc:
            runtime.metrics.backend_errors.labels(exc.kind).inc()
            raise
        runtime.metrics.ttft.observe(time.monotonic() - scope.started)
    except BaseException:
        scope.release()
        raise
    hold = request.hold_tool_calls if request.hold_tool_calls is not None else runtime.settings.hold_tool_calls
    if request.stream:
        include_usage = bool(request.stream_options and request.stream_options.include_usage)
        writer = ChunkWriter(new_completion_id(), runtime.model_name, runtime.settings.reasoning_field, include_usage)
        body = ChatStream(first, stream, parser, writer, plan, hold, runtime, scope)
        try:
            lead = body.lead()
        except BaseException:
            await body.aclose()
            raise
        return SSEResponse(body, lead=lead)
    try:
        return await until_disconnected(scope, complete(first, stream, parser, plan, runtime))
    finally:
        scope.release()


async def until_disconnected(scope: RequestScope, work: Awaitable[Response]) -> Response:
    """Run ``work``; if the client goes away first, cancel it (which closes the upstream request,
    so the backend stops generating for nobody)."""
    task = asyncio.ensure_future(work)
    if scope.request is None:
        return await task
    watcher = asyncio.ensure_future(_disconnected(scope.request))
    try:
        done, _ = await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
        if task in done:
            return task.result()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
        log.info("client disconnected before the answer was complete; upstream request closed")
        return Response(status_code=499)
    finally:
        watcher.cancel()
        if not task.done():
            task.cancel()


async def _disconnected(request: Request) -> None:
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


class ChatStream:
    """The SSE body of one streamed answer.

    ``lead()`` encodes what the first backend item already holds (at least the role chunk), so it
    leaves right behind the response head; iterating yields the rest. It ends with finish + usage + ``[DONE]``, or — if the backend
    fails after the first byte — with one ``data: {"error": …}`` event. ``aclose()`` (idempotent;
    the response calls it however the stream ends, iterated or not) closes the upstream request at
    once, gives back the concurrency slot and ends the stream in the metrics.
    """

    def __init__(self, first: Any, stream: Generation, parser: ResponseParser, writer: ChunkWriter,
                 plan: ChatPlan, hold: bool, runtime: Runtime, scope: RequestScope) -> None:
        self.pending: Any = first
        self.stream = stream
        self.parser = parser
        self.writer = writer
        self.plan = plan
        self.runtime = runtime
        self.scope = scope
        self.tally = ParseTally()
        self.filters = [self.tally, *event_filters(plan, hold)]
        self.role = writer.role()  # sent with the first text (one write instead of two)
        self.content: list[str] | None = [] if runtime.settings.log_content else None
        self.closed = False
        runtime.metrics.active_streams.inc()

    def _encode(self, events: list[Event]) -> bytes:
        for apply in self.filters:
            events = apply(events)
        return b"".join(self.writer.events(events))

    def _text(self, text: str) -> bytes:
        if self.content is not None:
            self.content.append(text)
        data = self._encode(self.parser.feed(text))
        if self.role:  # the role chunk goes out with the first text, whatever the parser holds back
            data, self.role = self.role + data, b""
        return data

    def lead(self) -> bytes:
        """The chunks the first backend item gives (``b""`` if it is not text)."""
        item = self.pending
        if not isinstance(item, TextDelta):
            return b""
        self.pending = None
        return self._text(item.text)

    def _finish(self, item: Finish) -> bytes:
        writer = self.writer
        tail = self.role + self._encode(self.parser.end(truncated=item.reason == "length"))
        reason = finish_reason(item.reason, writer.calls_completed, writer.unfinished_calls,
                               self.plan.named_tool is not None)
        tail += writer.finish(reason)
        if writer.include_usage:
            tail += writer.usage(item.usage)
        record_usage(self.runtime, item)
        self.tally.record(self.runtime, self.plan, self.parser)
        return tail + SSE_DONE

    async def __aiter__(self) -> AsyncIterator[bytes]:
        item = self.pending
        try:
            while True:
                if item is None:
                    item = await self.stream.__anext__()
                if isinstance(item, TextDelta):
                    data = self._text(item.text)
                    if data:
                        yield data
                    item = None
                    continue
                assert isinstance(item, Finish)
                yield self._finish(item)
                return
        except BackendError as exc:
            self.runtime.metrics.backend_errors.labels(exc.kind).inc()
            log.warning("backend failed mid-stream: %s", exc.message)
            yield self.role + sse(exc.body())
        finally:
            await self.aclose()

    async def aclose(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            self.runtime.metrics.active_streams.dec()
            if self.content:
                log.debug("completion", extra={"fields": {"completion": "".join(self.content)}})
            await self.stream.aclose()
        finally:
            self.scope.release()


def record_usage(runtime: Runtime, finish: Finish) -> None:
    if finish.usage is not None:
        runtime.metrics.tokens.labels("prompt").inc(finish.usage.prompt_tokens)
        runtime.metrics.tokens.labels("completion").inc(finish.usage.completion_tokens)


async def complete(first: Any, stream: Generation, parser: ResponseParser, plan: ChatPlan,
                   runtime: Runtime) -> Response:
    events: list[Event] = []
    item = first
    try:
        while isinstance(item, TextDelta):
            events += parser.feed(item.text)
            item = await stream.__anext__()
    except BackendError as exc:
        runtime.metrics.backend_errors.labels(exc.kind).inc()
        raise
    finally:
        await stream.aclose()
    assert isinstance(item, Finish)
    events += parser.end(truncated=item.reason == "length")
    tally = ParseTally()
    for apply in [tally, *event_filters(plan, hold=False)]:
        events = apply(events)
    message = fold(events)
    record_usage(runtime, item)
    tally.record(runtime, plan, parser)
    if runtime.settings.log_content:
        log.debug("completion", extra={"fields": {"content": message.content, "reasoning": message.reasoning}})
    reason = finish_reason(item.reason, len(message.calls), 0, plan.named_tool is not None)
    body = completion_object(new_completion_id(), runtime.model_name, message, reason, item.usage,
                             runtime.settings.reasoning_field)
    return JSONResponse(body)


def error_response(exc: APIError) -> JSONResponse:
    return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers or None)
