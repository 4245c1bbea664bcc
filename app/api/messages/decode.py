"""Anthropic Messages requests → the shared ``Ask``.

Decoding, block by block:

* ``system`` (a string or text blocks) is system text; a line Claude Code adds to it on every
  request (``x-anthropic-billing-header: cc_version=…; cc_entrypoint=…;``) is removed, so the
  prompt's prefix stays the same from one request to the next and backend prefix caches keep
  working. A ``system`` message inside ``messages`` (Claude Code 2.1 sends one) is system text there;
* user ``text`` blocks are the user's turn; each ``tool_result`` is a tool turn answering its
  ``tool_use_id`` (``is_error`` shown as an ``Error:`` prefix; a ``tool_reference`` block inside it
  loads that deferred tool);
* ``image`` blocks (base64 or url source) in a user message or a tool result are the turn's media
  items in place (``app.media``); ``document`` blocks too when they hold a PDF — a plain-text or
  content document is its text (its title, then its text);
* assistant ``text`` and ``tool_use`` blocks are the assistant's turn and its calls (with their ids);
  ``thinking`` / ``redacted_thinking`` blocks are its reasoning, when their signature verifies
  (``app.thinking_signature``), and are dropped otherwise;
* tools with ``defer_loading`` are offered to the model only once a ``tool_reference`` loaded them;
* ``tool_choice`` ``auto`` / ``any`` / ``tool`` / ``none`` are ``auto`` / ``required`` / a named tool /
  ``none``; ``disable_parallel_tool_use`` allows one call;
* ``thinking`` ``enabled`` / ``adaptive`` turn the template's thinking switch on, ``disabled`` (or no
  ``thinking``, as Anthropic defaults) off; ``budget_tokens`` goes to backends that enforce one;
  ``output_config.effort`` is the template's ``reasoning_effort``; ``output_config.format`` (a JSON
  schema) constrains the answer exactly as Chat Completions' ``response_format: json_schema`` does.

A final assistant message is a prefill: the answer continues its text (the parsers start where it
leaves them; the answer holds only what comes after it). Server tools, files by id and a final
assistant message with calls are 400s.
"""

from __future__ import annotations

import logging
from typing import Any

from app.api.messages.protocol import (
    Conversation,
    DocumentBlock,
    ImageBlock,
    MessagesRequest,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolReferenceBlock,
    ToolResultBlock,
    ToolUseBlock,
    block,
    invalid,
)
from app.api.messages.protocol import Tool as ToolModel
from app.backends.generation import Sampling
from app.conversation import Call, Role, Turn
from app.media import Part, base64_media, joined_text, media_url
from app.pipeline.ask import Ask, Tool
from app.prefix import Recall
from app.thinking_signature import ThinkingSigner

log = logging.getLogger("toolwire")

BILLING_HEADER = "x-anthropic-billing-header:"

#: Anthropic effort levels → reasoning_effort values templates know (low / medium / high)
EFFORT = {"max": "high", "xhigh": "high", "minimal": "low"}


def without_billing_header(text: str) -> str:
    """``text`` without the lines Claude Code adds per request (they change every time)."""
    if BILLING_HEADER not in text:
        return text
    return "\n".join(line for line in text.split("\n") if not line.startswith(BILLING_HEADER))


def system_text(system: str | list[dict[str, Any]] | None, where: str = "system") -> str:
    """The system prompt as one string (text blocks joined by newlines), billing lines removed."""
    if system is None:
        return ""
    if isinstance(system, str):
        return without_billing_header(system)
    texts = []
    for j, raw in enumerate(system):
        part = block(raw, f"{where}[{j}]", "system")
        assert isinstance(part, TextBlock)
        text = without_billing_header(part.text)
        if text.strip():
            texts.append(text)
    return "\n".join(texts)


class Decoder:
    """The request's messages as the shared conversation (see the module docstring); with a
    ``found`` (``app.api.messages.parse``), the units an earlier request decoded alike are taken from it."""

    def __init__(self, signer: ThinkingSigner, found: Recall | None = None) -> None:
        self.signer = signer
        self.found = found
        self.turns: list[Turn] = []
        self.loaded_tools: set[str] = set()  # deferred tools a tool_reference loaded
        self.dropped_thinking = 0  # handed-back thinking blocks that did not verify

    def _taken(self, i: int) -> int:
        """Take the turns of the units from ``i`` on that an earlier request decoded alike; the unit
        after them (``i`` when none)."""
        taken = self.found.take(i) if self.found is not None else None
        if taken is None:
            return i
        end, turns, payload = taken
        self.turns.extend(turns)
        for _model, loaded in payload:
            self.loaded_tools |= loaded
        return end

    def _decoded(self, model: Any, loaded_before: set[str]) -> None:
        if self.found is not None:
            self.found.after(len(self.turns), (model, frozenset(self.loaded_tools - loaded_before)))

    def decode(self, request: Conversation) -> list[Turn]:
        unit = self._taken(0)  # unit 0 is the system prompt, unit i + 1 message i
        if unit == 0:
            system = system_text(request.system)
            if system:
                self.turns.append(Turn("system", system))
            self._decoded(None, self.loaded_tools)
            unit = self._taken(1)
        while unit <= len(request.messages):
            i = unit - 1
            message = request.messages[i]
            before = set(self.loaded_tools)
            where = f"messages[{i}]"
            content = message.content
            if message.role == "system":
                text = content if isinstance(content, str) else system_text(content, f"{where}.content")
                self.turns.append(Turn("system", without_billing_header(text)))
            elif isinstance(content, str):
                self.turns.append(Turn(message.role, content))
            elif message.role == "user":
                self._user(content, f"{where}.content")
            else:
                self._assistant(content, f"{where}.content")
            self._decoded(message, before)
            unit = self._taken(unit + 1)
        if self.turns and self.turns[-1].role == "assistant" and self.turns[-1].calls:
            raise invalid(f"messages[{len(request.messages) - 1}]: a final assistant message with tool_use blocks "
                          "needs their tool_result blocks in a user message after it")
        return self.turns

    def _user(self, blocks: list[dict[str, Any]], where: str) -> None:
        parts: list[Part] = []
        for j, raw in enumerate(blocks):
            at = f"{where}[{j}]"
            part = block(raw, at, "user")
            if isinstance(part, TextBlock):
                parts.append(part.text)
                continue
            if isinstance(part, (ImageBlock, DocumentBlock)):
                parts.append(media_block(part, at))
                continue
            assert isinstance(part, ToolResultBlock)
            if parts:  # what was written before a result stays before it
                self.turns.append(user_turn("user", parts))
                parts = []
            text, result_parts = self._result(part, at)
            self.turns.append(Turn("tool", text, tool_call_id=part.tool_use_id, parts=result_parts))
        if parts or not blocks:
            self.turns.append(user_turn("user", parts))

    def _result(self, result: ToolResultBlock, where: str) -> tuple[str, tuple[Part, ...]]:
        """A tool result's text, and its parts when it holds images or documents."""
        content = result.content
        parts: list[Part] = []
        if isinstance(content, str):
            parts.append(content)
        elif content is not None:
            for k, raw in enumerate(content):
                at = f"{where}.content[{k}]"
                part = block(raw, at, "tool_result")
                if isinstance(part, ToolReferenceBlock):
                    self.loaded_tools.add(part.tool_name)
                    parts.append(f"Tool loaded: {part.tool_name}")
                elif isinstance(part, (ImageBlock, DocumentBlock)):
                    parts.append(media_block(part, at))
                else:
                    assert isinstance(part, TextBlock)
                    parts.append(part.text)
        if result.is_error:
            parts = [f"Error: {parts[0]}", *parts[1:]] if parts and isinstance(parts[0], str) else ["Error: ", *parts]
        turn = user_turn("tool", parts)
        return turn.text, turn.parts

    def _assistant(self, blocks: list[dict[str, Any]], where: str) -> None:
        texts: list[str] = []
        calls: list[Call] = []
        reasoning: list[str] = []
        for j, raw in enumerate(blocks):
            part = block(raw, f"{where}[{j}]", "assistant")
            if isinstance(part, TextBlock):
                texts.append(part.text)
            elif isinstance(part, ToolUseBlock):
                calls.append(Call(part.id, part.name, part.input))
            else:
                if isinstance(part, ThinkingBlock):
                    recovered = self.signer.recover(part.thinking, part.signature)
                else:
                    assert isinstance(part, RedactedThinkingBlock)
                    recovered = self.signer.unseal(part.data)
                if recovered is None:
                    self.dropped_thinking += 1
                elif recovered:
                    reasoning.append(recovered)
        self.turns.append(Turn("assistant", "".join(texts), tuple(calls), "\n".join(reasoning) if reasoning else None))


def user_turn(role: Role, parts: list[Part]) -> Turn:
    """A user (or tool) turn of text blocks joined by newlines, with its parts kept when it holds media."""
    text = joined_text(parts, "\n")
    return Turn(role, text, parts=tuple(parts) if any(not isinstance(p, str) for p in parts) else ())


def media_block(part: ImageBlock | DocumentBlock, where: str) -> Part:
    """An image or document block as a media item (a plain-text document: its text, after its title)."""
    source = part.source
    kind = source.get("type")
    at = f"{where}.source"
    if kind == "base64":
        return base64_media(source.get("data"), f"{at}.data", "image" if part.type == "image" else "document")
    if kind == "url":
        return media_url(source.get("url"), f"{at}.url", "image" if part.type == "image" else "document")
    if kind == "file":
        raise invalid(f"{at}: files by id are not supported (this server has no Files API); send the data")
    if isinstance(part, DocumentBlock) and kind in ("text", "content"):
        body = source.get("data") if kind == "text" else source.get("content")
        if isinstance(body, list):
            texts = []
            for k, raw in enumerate(body):
                inner = block(raw, f"{at}.content[{k}]", "system")
                assert isinstance(inner, TextBlock)
                texts.append(inner.text)
            body = "\n".join(texts)
        if not isinstance(body, str):
            raise invalid(f"{at}.{'data' if kind == 'text' else 'content'}: expected text")
        return f"{part.title}\n\n{body}" if part.title else body
    allowed = "base64, url" + (", text, content" if isinstance(part, DocumentBlock) else "")
    raise invalid(f"{at}.type: expected one of {allowed}")


def tools_offered(request: Conversation, loaded: set[str]) -> list[Tool]:
    """The request's tools; deferred ones only once loaded. An empty ``input_schema`` is an object
    without properties. Two tools of one name (deferred or not) are a 400."""
    seen: set[str] = set()
    for i, tool in enumerate(request.tools or ()):
        if tool.name in seen:
            raise invalid(f"tools[{i}].name: two tools are named {tool.name[:64]!r}")
        seen.add(tool.name)
    return [tool.offered(_offered) for tool in request.tools or () if not tool.defer_loading or tool.name in loaded]


def _offered(tool: ToolModel) -> Tool:
    return Tool.function(tool.name, tool.input_schema or {"type": "object", "properties": {}}, tool.description)


def messages_ask(request: Conversation, signer: ThinkingSigner) -> Ask:
    """The request as the shared ``Ask`` (``max_tokens`` and sampling when it is a ``MessagesRequest``),
    taking from the prefix service what it has of the conversation (``request._recall``:
    ``app.api.messages.parse``)."""
    found: Recall | None = request._recall
    decoder = Decoder(signer, found)
    turns = decoder.decode(request)
    if decoder.dropped_thinking:
        log.info("dropped %d handed-back thinking block(s) whose signature did not verify", decoder.dropped_thinking)
    choice = request.tool_choice
    kwargs: dict[str, Any] = {}
    config = request.output_config
    effort = config.effort if config else None
    if effort:
        kwargs["reasoning_effort"] = EFFORT.get(effort, effort)
    response_format = None
    if config is not None and config.format is not None:
        response_format = {"type": "json_schema",
                           "json_schema": {"name": "output", "schema": config.format.schema_, "strict": True}}
    thinking = request.thinking
    sampling = Sampling()
    if isinstance(request, MessagesRequest):
        sampling = Sampling(max_tokens=request.max_tokens, temperature=request.temperature, top_p=request.top_p,
                            top_k=request.top_k, stop=list(request.stop_sequences or []))
    ask = Ask(
        turns=turns,
        continue_final=bool(turns) and turns[-1].role == "assistant",
        tools=tools_offered(request, decoder.loaded_tools),
        tool_choice={"auto": "auto", "any": "required", "none": "none"}.get(choice.type) if choice else None,  # type: ignore[arg-type]
        named_tool=choice.name if choice and choice.type == "tool" else None,
        parallel_tool_calls=not (choice and choice.disable_parallel_tool_use),
        response_format=response_format,
        format_param="output_config.format.schema",
        sampling=sampling,
        template_kwargs=kwargs,
        thinking=thinking is not None and thinking.type != "disabled",
        thinking_budget=thinking.budget_tokens if thinking is not None and thinking.type == "enabled" else None,
    )
    if found is not None:
        ask.prefix = found.note(turns)
    return ask


def omits_thinking(request: Conversation) -> bool:
    return bool(request.thinking and request.thinking.display == "omitted")
