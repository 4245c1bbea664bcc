"""A planned request run against the backend: its text through the parsers, as events.

A ``Run`` takes one answer's stream once its first item has arrived (``app.pipeline.choices``
opens it) and hands out parser events: ``lead()`` those of the first item (so they can leave with
the response head), iteration the rest, then one ``Finished``. A backend failure after the first
byte raises ``BackendError`` from the iteration; the face encodes it as its own error event.
``aclose()`` closes the upstream request (idempotent).

``collect`` drains a run for a non-streaming answer: the same events, so streaming and
non-streaming answers cannot disagree.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from app.backends import Finish, TextDelta
from app.backends.generation import Generation, TokenPiece, Usage
from app.errors import BackendError
from app.metrics import Metrics
from app.pipeline.logprobs import ContentLogprobs
from app.pipeline.plan import Plan
from parsers import ResponseParser
from parsers.events import CallArgs, CallEnd, Content, Event, Reasoning

log = logging.getLogger("toolwire")


@dataclass
class Finished:
    """How a run ended. ``reason`` is the backend's (``stop`` / ``length``); ``calls`` counts calls
    that completed, ``unfinished`` calls shown in part that never completed; ``stop_sequence`` is
    the request's stop string that ended the output, when the backend says which."""

    reason: str
    usage: Usage | None
    calls: int
    unfinished: int
    stop_sequence: str | None = None
    #: generated tokens whose text went into reasoning (see ``ReasoningTokens``)
    reasoning_tokens: int = 0


class ParseTally:
    """Counts parse outcomes for ``Finished`` and the metrics (a pass-through event filter)."""

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

    def record(self, metrics: Metrics, label: str, parser: ResponseParser) -> None:
        events = metrics.parse_events
        tools = parser.tools
        for name, count in (("tool_call", self.calls), ("unfinished_call", self.unfinished),
                            ("malformed_passthrough", tools.malformed_calls if tools else 0),
                            ("unknown_tool", tools.unknown_tool_names if tools else 0)):
            if count:
                events.labels(label, name).inc(count)


class ReasoningTokens:
    """Counts the generated tokens whose text became reasoning. The backend hands text on in
    pieces of one or more tokens; a piece's tokens are shared out by the share of reasoning in the
    text the parsers released for it (a piece they held back counts with the next one that was
    released). Exact when each piece is one token, as when tokens are written one at a time."""

    __slots__ = ("count", "unplaced")

    def __init__(self) -> None:
        self.count = 0.0
        self.unplaced = 0

    def add(self, tokens: int, events: list[Event]) -> None:
        self.unplaced += tokens
        reasoning = total = 0
        for event in events:
            kind = type(event)
            if kind is Reasoning:
                n = len(event.text)  # type: ignore[union-attr]
                reasoning += n
                total += n
            elif kind is Content or kind is CallArgs:
                total += len(event.text)  # type: ignore[union-attr]
        if total:
            self.count += self.unplaced * reasoning / total
            self.unplaced = 0

    def __int__(self) -> int:
        return round(self.count)


#: warnings given once per process
_WARNED = {"constraint_ignored": False}


class Run:
    """One answer's events (see the module docstring). With ``logprobs`` asked, the text is fed to
    the parsers token by token and content events carry their tokens' entries (``app.pipeline.logprobs``).
    ``first`` may be ``None`` (the stream's first item is still to come)."""

    def __init__(self, first: Any, stream: Generation, plan: Plan, parser: ResponseParser, metrics: Metrics,
                 hold: bool, count_prompt: bool = True) -> None:
        self.pending: Any = first
        self.stream = stream
        self.plan = plan
        self.metrics = metrics
        self.parser = parser  # built before the backend was asked: off the first token's path
        self.tally = ParseTally()
        self.reasoning = ReasoningTokens()
        self.filters = [self.tally, *plan.filters(hold)]
        self.finished: Finished | None = None
        #: the prompt's token count if the backend told it with the first item (else known at the end)
        self.prompt_tokens: int | None = (first.prompt_tokens if isinstance(first, TextDelta)
                                          else first.usage.prompt_tokens if isinstance(first, Finish) and first.usage
                                          else None)
        self.text: list[str] | None = None  # the raw output, when content logging asked for it
        top = plan.ask.top_logprobs
        self.logprobs = ContentLogprobs(top) if top is not None else None
        self.count_prompt = count_prompt  # one of ``n`` answers counts the shared prompt in the metrics
        self.closed = False

    def _apply(self, events: list[Event]) -> list[Event]:
        for apply in self.filters:
            events = apply(events)
        return events

    def _feed(self, item: TextDelta) -> list[Event]:
        if self.text is not None:
            self.text.append(item.text)
        if self.logprobs is not None and item.pieces is not None:
            return self._feed_pieces(self.logprobs, item.pieces or [(item.text, [])])
        events = self._apply(self.parser.feed(item.text))
        self.reasoning.add(item.tokens, events)
        return events

    def _feed_pieces(self, logprobs: ContentLogprobs, pieces: list[TokenPiece]) -> list[Event]:
        out: list[Event] = []
        for text, tokens in pieces:
            logprobs.add(text, tokens)
            events = self._apply(self.parser.feed(text))
            self.reasoning.add(len(tokens), events)
            if events:
                out += logprobs.place(events)
        return out

    def lead(self) -> list[Event]:
        """The events of the first backend item, if it is text (``[]`` otherwise)."""
        item = self.pending
        if not isinstance(item, TextDelta):
            return []
        self.pending = None
        return self._feed(item)

    def _finish(self, item: Finish) -> list[Event]:
        events = self.parser.end(truncated=item.reason == "length")
        for apply in self.filters:  # each filter's held events go on through the filters after it
            events = apply(events)
            finish = getattr(apply, "finish", None)
            if finish is not None:
                events = events + finish()
        self.reasoning.add(0, events)
        if self.logprobs is not None and events:
            events = self.logprobs.place(events)
        self.finished = Finished(item.reason, item.usage, self.tally.calls, self.tally.unfinished, item.stop_sequence,
                                 int(self.reasoning))
        usage = item.usage
        if usage is not None:
            if self.count_prompt:
                self.metrics.tokens.labels("prompt").inc(usage.prompt_tokens)
            self.metrics.tokens.labels("completion").inc(usage.completion_tokens)
        self.tally.record(self.metrics, self.plan.label, self.parser)
        if self.plan.constraint_ignored(self.parser) and not _WARNED["constraint_ignored"]:
            _WARNED["constraint_ignored"] = True
            log.warning("the backend did not apply the tool-call constraint it was sent (an old vLLM? try "
                        "--vllm-legacy-guided); its output was parsed in the model's own format instead")
        return events

    async def __aiter__(self) -> AsyncIterator[list[Event]]:
        """Event batches until the backend finishes (then ``self.finished`` is set; the last batch
        holds what the parsers released at the end, possibly nothing)."""
        item = self.pending
        self.pending = None
        try:
            while True:
                if item is None:
                    item = await self.stream.__anext__()
                if isinstance(item, TextDelta):
                    events = self._feed(item)
                    if events:
                        yield events
                    item = None
                    continue
                assert isinstance(item, Finish)
                yield self._finish(item)
                return
        except BackendError as exc:
            self.metrics.backend_errors.labels(exc.kind).inc()
            raise

    async def aclose(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self.text:
            log.debug("completion", extra={"fields": {"completion": "".join(self.text)}})
        await self.stream.aclose()


async def collect(run: Run) -> tuple[list[Event], Finished]:
    """All of a run's events and how it ended (the run is closed afterwards)."""
    events = run.lead()
    try:
        async for batch in run:
            events += batch
    finally:
        await run.aclose()
    assert run.finished is not None
    return events, run.finished
