"""One plan per request: everything about the model's formats and the backend's constraint,
resolved once and read by the constraint builder, the parsers and the backend alike.

``Plan`` adds to the server's ``Formats`` (``app.formats``) one request's prompt, whether the
output starts inside a reasoning block (from the rendered prompt's tail, else the parser's default
— decided in ``Formats`` and nowhere else), and the constraint. The prompt is rendered through
``ControlText`` (``app.templates.literal``): where client text holds a control token's string, the
plan also says which spans of it must be read as plain text (``app.pipeline.literal`` sends them so).
"""

from __future__ import annotations

from collections.abc import Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from app.backends.base import Backend
from app.backends.generation import GenerationRequest
from app.constraints.tools import Constraint, ConstraintRequest
from app.conversation import Turn
from app.errors import bad_request
from app.formats import Formats
from app.media import Media, MediaRefused, Remote, items
from app.pipeline.ask import Ask, Tool
from app.pipeline.fence import JsonFence
from app.templates.chat_template import ChatTemplate, JsonMemo
from app.templates.literal import ControlText, ControlTextRejected, Span
from app.templates.prompt import render_conversation
from app.templates.resume import RenderState
from app.templates.switches import thinking_kwargs
from detectors.tools.constrained import ConstrainedOrOwn, JsonCallArray, NamedArguments
from parsers import FunctionCallParser, ReasoningParser, ResponseParser, build_response_parser
from parsers.fold import CallHolder, CallLimit
from parsers.function_call import ToolCallDetector
from parsers.registry import tool_detector_class
from parsers.response import OpeningSwitch
from parsers.tools import ToolSpec


@dataclass
class Plan:
    """A request resolved: its prompt, tools, formats and constraint (see the module docstring)."""

    ask: Ask
    prompt: str
    tools: list[Tool]  # offered to the model (rendered)
    specs: tuple[ToolSpec, ...]  # their specs, for the constraint and the parser
    formats: Formats
    in_reasoning: bool  # the output starts inside a reasoning block
    constraint: Constraint
    parse_tools: bool  # tool calls are parsed out of the output
    max_calls: int | None = None  # calls one answer may hold; the text of any beyond is content
    prefill: str = ""  # the assistant text the answer continues (``Ask.continue_final``), after ``prompt``
    #: stretches of ``prompt + prefill`` that came from a client and spell a control token: read as text
    spans: tuple[Span, ...] = ()
    #: the prompt in tokens when it has spans (``app.pipeline.literal.encode_prompt``)
    tokens: list[str | int] | list[int] | None = None
    #: what the render leaves for the conversation's next turn (``app.templates.resume``; it travels
    #: back from a worker with the plan), and how many loop iterations it took from the turn before
    render: RenderState | None = None
    reused_iterations: int = 0
    #: how many first turns of the conversation were rendered with every client string plain
    #: (nothing to escape or trace: ``app.templates.literal``) — all rendered, or none: they are not
    #: scanned again when they come again (``app.prefix``: ``Note.settled``)
    clean: int = 0

    @property
    def named_tool(self) -> str | None:
        return self.ask.named_tool

    @property
    def label(self) -> str:
        """The tool parser's name for metrics."""
        if not self.parse_tools:
            return "none"
        if self.constraint.output != "wire":
            return self.constraint.output
        return self.formats.label

    def parser(self) -> ResponseParser:
        """A fresh parser chain for one answer."""
        output = self.constraint.output
        tool_parser = self.formats.tools if self.parse_tools else None

        def own_format() -> ResponseParser:  # the tool format owns its envelope even when no call is read
            return build_response_parser(self.specs, self.formats.tools, self.formats.reasoning, self.prompt,
                                         in_reasoning=self.in_reasoning, max_calls=self.max_calls,
                                         read_calls=self.parse_tools, prefill=self.prefill)

        if not self.parse_tools or output == "wire":
            return own_format()
        # the backend was asked for JSON; if it did not apply the constraint, the model's own format
        specs, named = self.specs, self.named_tool or ""
        openers = "[" if output == "json_array" else "{"

        def constrained() -> ToolCallDetector:
            return JsonCallArray(specs) if output == "json_array" else NamedArguments(specs, named)

        expected = ResponseParser(None, FunctionCallParser(specs, detector=constrained(), max_calls=self.max_calls))
        reasoning_name = self.formats.reasoning
        if not self.constraint.reasoning_first or reasoning_name is None:
            return OpeningSwitch(openers, expected, own_format)

        def thinks_first() -> ResponseParser:  # a reasoning block, then the JSON (or the own format)
            own = tool_detector_class(tool_parser)(specs) if tool_parser is not None else None
            detector = ConstrainedOrOwn(constrained(), own, openers)
            detector.prepare(self.prompt)
            reasoning = ReasoningParser(reasoning_name, force_reasoning=True, prompt=self.prompt,
                                        stop_markers=own.start_markers if own is not None else ())
            return ResponseParser(reasoning, FunctionCallParser(specs, detector=detector, max_calls=self.max_calls))

        return OpeningSwitch(openers, expected, thinks_first)  # JSON at once: no thinking came first

    def constraint_ignored(self, parser: ResponseParser) -> bool:
        """Whether the answer ``parser`` read came in the model's own format although the backend
        was asked for constrained JSON (the backend did not apply the constraint)."""
        if isinstance(parser, OpeningSwitch) and parser.fell_back and not self.constraint.reasoning_first:
            return True
        detector = parser.tools.detector if parser.tools is not None else None
        return isinstance(detector, ConstrainedOrOwn) and detector.fell_back

    def filters(self, hold: bool) -> list[Any]:
        """Post-parse event filters: a JSON answer's Markdown fence stripped when JSON was asked for
        (``app.pipeline.fence``); at most ``max_calls`` calls; calls held until complete. A filter
        with a ``finish()`` is flushed at the end of the answer."""
        filters: list[Any] = []
        if (self.ask.response_format or {}).get("type") in ("json_object", "json_schema"):
            filters.append(JsonFence())
        if self.constraint.max_calls is not None:
            filters.append(CallLimit(self.constraint.max_calls))
        if hold:
            filters.append(CallHolder())
        return filters

    def generation_request(self) -> GenerationRequest:
        budget = self.ask.thinking_budget if self.ask.thinking is not False else None
        gate = self.formats.reasoning_gate(self.in_reasoning) if budget is not None else None
        prompt = self.prompt + self.prefill if self.prefill else self.prompt  # a JsonText stays one
        return GenerationRequest(prompt, self.ask.sampling, self.formats.markers(self.parse_tools),
                                 self.constraint.fields, budget, gate, self.ask.top_logprobs, tokens=self.tokens,
                                 media=prompt_media(self.ask.turns))


def plan_request(ask: Ask, formats: Formats, template: ChatTemplate, backend: Backend,
                 max_calls: int | None = None, control: ControlText | None = None) -> Plan:
    """Render the prompt (traced by ``control``) and resolve the start state and the constraint
    (``TemplateError`` if the template refuses the conversation; a 400 if ``control`` rejects it).
    The render continues the one ``ask.prefix`` names (in a worker, where the note is blank, it
    renders whole), leaving its state in the plan."""
    tools = offered(ask)
    resume = ask.prefix.resume if ask.prefix is not None else None
    media = prompt_media(continued(ask)[0])
    marker = media_style(media, backend)
    prompt, prefill, spans, clean = _render(ask, formats, template, [t.shown for t in tools] or None, control,
                                            marker, bool(media))
    if marker is not None and prompt.count(marker) != len(media):
        raise MediaRefused(f"the prompt holds the backend's media marker {prompt.count(marker)} times for "
                           f"{len(media)} images: the chat template left an image out, or the conversation's text "
                           "holds the marker itself", code="media_marker_mismatch")
    if backend.facts.adds_bos and template.bos_token and prompt.startswith(template.bos_token):
        cut = len(template.bos_token)  # the backend adds its own BOS token
        prompt, spans = prompt[cut:], tuple((a - cut, b - cut) for a, b in spans)
    inside = formats.starts_inside_reasoning(prompt)
    specs = tuple(t.spec for t in tools)
    request = ConstraintRequest.of(ask.tool_choice, ask.named_tool, specs, formats.wire, ask.parallel_tool_calls,
                                   formats.reasoning_gate(inside), ask.response_format)
    constraint = backend.constrain(request)
    parse_tools = bool(tools) and (formats.tools is not None or constraint.output != "wire")
    return Plan(ask, prompt, tools, specs, formats, inside, constraint, parse_tools, max_calls, prefill, spans,
                render=resume.state if resume is not None else None,
                reused_iterations=resume.reused if resume is not None else 0, clean=clean)


def offered(ask: Ask) -> list[Tool]:
    """The tools the model is offered (rendered): none with ``tool_choice`` ``none``, the named one
    alone when one is named."""
    if not ask.tools or ask.tool_choice == "none":
        return []
    return [t for t in ask.tools if ask.named_tool is None or t.spec.name == ask.named_tool]


#: where ``tojson`` keeps its answers for a request with no prefix note (a short conversation): the
#: process's prefix service, set by the pipeline around a render on the event loop (``None`` in a
#: worker, which keeps nothing) — agents and chat clients send the same tools every request
shared_memo: ContextVar[JsonMemo | None] = ContextVar("shared_memo", default=None)


def _render(ask: Ask, formats: Formats, template: ChatTemplate, shown: list[dict[str, Any]] | None,
            control: ControlText | None, marker: str | None = None,
            media: bool = False) -> tuple[str, str, tuple[Span, ...], int]:
    """The prompt, the prefill after it, their client control spans (``app.templates.literal``) and
    how many turns were rendered with every client string plain (``Plan.clean``); images as
    ``marker`` says (``app.templates.prompt.MediaStyle``). The conversation as the client sent it
    renders continuing the render ``ask.prefix`` names (and with its ``tojson`` memo); a tracing
    render of it rewritten (``control``) renders whole, and is never kept. Turns an earlier clean
    render had (``Note.settled``) are not scanned for control text again.

    A prompt with images goes to the backend as text (llama-server's multimodal prompt is one
    string; vLLM's chat endpoint takes text), so where client control text would be sent as tokens
    it is escaped instead. The prefill is the continued message written for the prompt's tail
    (``Formats.continuation``: inside a thought the generation prompt opened, or not), so where
    control text is traced a continuation's prompt is first rendered plainly to read that tail."""
    server_kwargs = thinking_kwargs(template, ask.thinking)
    call_text = formats.call_text()
    turns, final = continued(ask)
    note = ask.prefix
    memo = note.service if note is not None else shared_memo.get()

    def render(rendered: Any, tools: list[dict[str, Any]] | None, client_kwargs: dict[str, Any]) -> str:
        own = _same(rendered, turns) and _same(tools, shown) and client_kwargs is ask.template_kwargs
        return render_conversation(template, rendered, tools, call_text, {**server_kwargs, **client_kwargs},
                                   note.resume if own and note is not None else None, memo, marker)

    if media and control is not None and control.mode == "tokens":
        control = control.escaping()

    def prefill_after(prompt: str) -> str:
        return formats.continuation(final, formats.starts_inside_reasoning(prompt)) if final is not None else ""

    if control is None or not control.active:
        prompt = render(turns, shown, ask.template_kwargs)
        return prompt, prefill_after(prompt), (), 0
    prefill = prefill_after(render(turns, shown, ask.template_kwargs)) if final is not None else ""
    try:
        rendered = control.render(render, turns, shown, ask.template_kwargs, prefill, formats.markers(True),
                                  note.settled if note is not None else ())
    except ControlTextRejected as exc:
        raise bad_request(str(exc), code="control_text_rejected") from None
    return rendered.prompt, rendered.prefill, rendered.spans, len(turns) if rendered.clean else 0


def _same(these: Sequence[Any] | None, those: Sequence[Any] | None) -> bool:
    """Whether ``these`` holds the very objects of ``those`` (a rewrite that changed nothing gives
    a new list of the same turns and tools: the render still continues the kept one)."""
    if these is those:
        return True
    if these is None or those is None or len(these) != len(those):
        return False
    return all(a is b for a, b in zip(these, those, strict=True))


def continued(ask: Ask) -> tuple[list[Turn], Turn | None]:
    """The turns to render and the message the answer continues: with ``continue_final``, a final
    assistant message without calls is not rendered as a finished turn — the prompt opens the
    assistant's turn (generation prompt) and its thought and text follow (``Formats.continuation``),
    for the model to go on from."""
    last = ask.turns[-1] if ask.turns else None
    if not ask.continue_final or last is None or last.role != "assistant" or last.calls:
        return ask.turns, None
    return ask.turns[:-1], last


def prompt_media(turns: list[Turn]) -> tuple[Media, ...]:
    """The images of ``turns`` in the order the prompt holds them (the order of the turns and of
    their parts: shaping a conversation for a template never reorders images)."""
    found = tuple(item for turn in turns if turn.parts for item in items(turn.parts))
    if any(isinstance(item, Remote) for item in found):  # resolved before planning (app.media.fetch)
        raise AssertionError("remote media reached the plan unfetched")
    return found  # type: ignore[return-value]


def media_style(media: tuple[Media, ...], backend: Backend) -> str | None:
    """How the prompt writes ``media`` for ``backend`` (its media marker, or ``None``: the template's own
    placeholders); a 400 that says why when the backend or its model cannot take one of them —
    before the backend is asked."""
    if not media:
        return None
    accepts = backend.dialect.media(backend.facts)
    first = media[0]
    if accepts is None:
        raise MediaRefused(f"{first.where}: this backend ({backend.kind}) takes no images or documents; toolwire sends "
                           "them to llama-server (started with --mmproj) and vLLM only", first.where)
    for item in media:
        if item.kind == "document":
            raise MediaRefused(f"{item.where}: {accepts.name} cannot read PDF documents (it takes images only); send "
                               "the document's pages as images or its text as text", item.where)
    if accepts.modalities is not None and "image" not in accepts.modalities:
        raise MediaRefused(f"{first.where}: the model {accepts.name} serves takes no images (it was started without "
                           "a multimodal projector: llama-server --mmproj)", first.where)
    for item in media:
        if item.media_type not in accepts.types:
            names = ", ".join(sorted(t.removeprefix("image/").upper() for t in accepts.types))
            raise MediaRefused(f"{item.where}: {accepts.name} cannot decode {item.media_type} images (it takes "
                               f"{names})", item.where)
    return accepts.marker
