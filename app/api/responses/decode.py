"""Responses API requests → the shared ``Ask``.

Decoding the conversation:

* ``instructions`` is the first system text; ``developer`` and ``system`` messages are system text;
* a run of assistant items — ``reasoning``, an assistant ``message``, ``function_call`` /
  ``custom_tool_call`` — is one assistant turn (a reasoning or message item after calls starts the
  next one); ``function_call_output`` / ``custom_tool_call_output`` are tool turns answering their
  ``call_id``;
* a reasoning item's text is its ``encrypted_content`` when that was sealed by this server for the
  same API key (clients that keep no state hand it back that way: ``include:
  ["reasoning.encrypted_content"]``); reasoning read back from the tenant's store is its stored text,
  and so is a reasoning item handed back by the id toolwire stored it under (the stored copy's
  text, whatever the item says); any other reasoning item — a seal that does not verify, or text
  the client wrote in ``content`` / ``summary`` — is dropped: only reasoning toolwire wrote reaches
  the prompt as the model's thinking;
* with ``previous_response_id`` the stored chain — each earlier response's input and output — comes
  first, or with ``conversation`` the conversation's items (``context``; instructions are not
  carried over, as OpenAI does); ``item_reference`` items are replaced by what they refer to
  before decoding (``context``);
* ``input_image`` and ``input_file`` parts (user messages, ``function_call_output`` content arrays)
  are the turn's media items (``app.media``; a text file is its text); a chain or conversation
  that holds them hands them back to the next prompt as stored;
* items of hosted tools (``web_search_call``, ``computer_call``, …: ``_SKIPPED_ITEMS``) are skipped —
  toolwire ran none of them and the model cannot see them — and are kept, in the input that is
  stored, as a stub of their ``id``, ``type`` and ``status`` only (``stub``): their payload is dropped.

Every item's ``type`` is a string, and a reasoning item's parts have string ``text``, whatever
becomes of them — anything else is a 400 naming the field.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from collections.abc import Set as AbstractSet
from itertools import compress, repeat
from operator import contains, not_
from typing import Any

from app.api.responses.context import Context
from app.api.responses.encode import id_maker, new_id
from app.api.responses.protocol import CUSTOM_INPUT, Parsed, ToolSet, shown
from app.backends.generation import Sampling
from app.bodies import Elements, as_elements, each
from app.conversation import Call, Turn
from app.errors import bad_request
from app.media import Part, file_data, file_url, media_url, no_file_ids
from app.pipeline.ask import Ask
from app.prefix import Note, PrefixService, Recall
from app.state import StoredItem
from app.thinking_signature import SEALED, ThinkingSigner

log = logging.getLogger("toolwire")

EFFORT = {"minimal": "low", "low": "low", "medium": "medium", "high": "high", "xhigh": "high"}
_TEXT_PARTS = ("input_text", "output_text", "text", "summary_text", "reasoning_text")
_SKIPPED_ITEMS = frozenset({"web_search_call", "file_search_call", "computer_call", "computer_call_output",
                            "code_interpreter_call", "image_generation_call", "mcp_call", "mcp_list_tools",
                            "local_shell_call", "local_shell_call_output", "tool_search_call",
                            "tool_search_output", "compaction"})


_ID_PREFIX = {"message": "msg_", "function_call": "fc_", "function_call_output": "fco_", "reasoning": "rs_",
              "custom_tool_call": "ctc_", "custom_tool_call_output": "ctco_"}


# --------------------------------------------------------------------------------------- input


#: the items decoded as a turn of their own, which end the run of assistant items before them
#: (``Decoder.item``, ``closes_run``): tool results, and messages of these roles
TOOL_RESULTS = ("function_call_output", "custom_tool_call_output")
OWN_TURN_ROLES = ("user", "system", "developer")


def closes_run(item: dict[str, Any]) -> bool:
    """Whether ``item`` is decoded as a turn of its own, ending the run of assistant items before it."""
    kind = item.get("type")
    return kind in TOOL_RESULTS or (kind == "message" and item.get("role") in OWN_TURN_ROLES)


def stub(item: dict[str, Any]) -> dict[str, Any]:
    """What is kept of an item the decoder skips (a hosted tool's call: toolwire ran none, and the
    model never sees them): its ``id`` (when it has one), ``type`` and ``status`` — never its
    payload, so a client cannot make the store (and every continuation that reads it back) carry
    what no prompt uses."""
    kept = {"id": item["id"], "type": item["type"]} if "id" in item else {"type": item["type"]}
    status = item.get("status")
    if isinstance(status, str) and len(status) <= 32:
        kept["status"] = status
    return kept


def normal_item(item: Any, _: bytes | None = None) -> dict[str, Any] | tuple[str, str]:
    """An input item as ``normalised_input`` makes it, an id aside — a function of the item alone
    (``app.bodies``: worked out once per item of an agent's conversation) — or, for an item that
    cannot be one, the 400's message and its param, both to follow ``input[i]``."""
    if not isinstance(item, dict):
        return ": an item must be an object", ""
    if "type" not in item and "role" in item:
        item = {"type": "message", **item}
    kind = item.get("type")
    if not isinstance(kind, str):
        return f".type: expected a string naming the item type, got {shown(kind)}", ".type"
    return stub(item) if kind in _SKIPPED_ITEMS else item


def normalised_input(raw: str | list[Any] | None, elements: Elements | None = None,
                     ids: bool = True) -> list[dict[str, Any]]:
    """The request's input as items (a string is one user message), each with a string ``type`` and
    — where ``ids`` (something stores the input: the response, a conversation) — an ``id`` (a new
    one where it had none); items the decoder skips are reduced to their ``stub`` (as they are
    stored). ``elements``: the input as the body read found it (``app.bodies``: an item of an
    earlier body is as that body's read made it)."""
    if raw is None:
        return []
    if isinstance(raw, str):
        return [{"id": new_id("msg_"), "type": "message", "role": "user",
                 "content": [{"type": "input_text", "text": raw}]}]
    items: list[Any] = list(each(elements, as_elements(elements, raw), "normal", normal_item))
    mint: Callable[[str], str] | None = None  # the ids the items lack
    # (in C: an item lacking an id — a problem is a tuple, holding no "id" — or, without ids, a problem)
    unsettled = map(not_, map(contains, items, repeat("id"))) if ids else map(isinstance, items, repeat(tuple))
    for i in compress(range(len(items)), unsettled):
        item = items[i]
        if isinstance(item, tuple):
            message, param = item
            raise bad_request(f"input[{i}]{message}", f"input.{i}{param}")
        mint = mint or id_maker(len(items) - i)
        items[i] = {"id": mint(_ID_PREFIX.get(item["type"], "item_")), **item}
    return items


def _param(where: str) -> str:
    """``input[3]`` as a ``param`` spells it: ``input.3``."""
    return where.replace("[", ".").replace("]", "")


def _text(content: Any, where: str) -> str:
    return _content(content, where, media=False)[0]


_DETAILS = frozenset({"auto", "low", "high"})


def _content(content: Any, where: str, media: bool = True) -> tuple[str, tuple[Part, ...]]:
    """Content (a string or a list of parts) as text, and its parts in order when it holds images or
    files (``input_image`` by data URL — or ``http(s)`` URL where the server fetches them — with
    ``detail``; ``input_file`` by ``file_data`` or ``file_url``: a PDF, or a text file read as text).
    ``media``: whether images and files may appear here (user messages, tool outputs)."""
    if content is None:
        return "", ()
    if isinstance(content, str):
        return content, ()
    if not isinstance(content, list):
        raise bad_request(f"{where}: expected a string or a list of content parts", _param(where))
    texts: list[str] = []
    parts: list[Part] = []
    with_media = False
    for j, part in enumerate(content):
        at = f"{where}[{j}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in _TEXT_PARTS and isinstance(part.get("text"), str):
            texts.append(part["text"])
            parts.append(part["text"])
        elif kind == "refusal" and isinstance(part.get("refusal"), str):
            texts.append(part["refusal"])
            parts.append(part["refusal"])
        elif kind in ("input_image", "input_file") and media:
            item = _media_part(part, at)
            if isinstance(item, str):
                texts.append(item)
            else:
                with_media = True
            parts.append(item)
        else:
            allowed = "input_text, input_image, input_file" if media else "input_text, output_text, refusal"
            raise bad_request(f"{at}: content part type {shown(kind)} is not supported here ({allowed})", _param(at))
    return "".join(texts), tuple(parts) if with_media else ()


def _media_part(part: dict[str, Any], at: str) -> Part:
    if part["type"] == "input_image":
        detail = part.get("detail")
        if detail is not None and detail not in _DETAILS:
            raise bad_request(f"{at}.detail: expected auto, low or high", f"{_param(at)}.detail")
        if part.get("image_url") is None and part.get("file_id") is not None:
            raise no_file_ids(f"{at}.file_id")
        return media_url(part.get("image_url"), f"{at}.image_url", "image", detail)
    if part.get("file_data") is not None:
        return file_data(part["file_data"], f"{at}.file_data")
    if part.get("file_url") is not None:
        return file_url(part["file_url"], f"{at}.file_url")
    raise no_file_ids(f"{at}.file_id")


class Decoder:
    """Input items → the shared conversation (see the module docstring)."""

    def __init__(self, tools: ToolSet, signer: ThinkingSigner, stored: Mapping[str, StoredItem] | None = None,
                 own: AbstractSet[str] = frozenset()) -> None:
        self.tools = tools
        self.signer = signer
        self.stored = stored or {}  # the tenant's stored items by id (app.api.responses.context)
        self.own = own  # those of them that are the conversation's own items (decoded with them)
        self.turns: list[Turn] = []
        self._text: list[str] = []
        self._calls: list[Call] = []
        self._reasoning: list[str] | None = None
        self.dropped_reasoning = 0
        self.looked = 0  # lookups of stored items made (the conversation's own not counted)

    def _flush(self) -> None:
        if self._text or self._calls or self._reasoning is not None:
            reasoning = "\n".join(self._reasoning) if self._reasoning is not None else None
            self.turns.append(Turn("assistant", "".join(self._text), tuple(self._calls), reasoning))
        self._text, self._calls, self._reasoning = [], [], None

    @staticmethod
    def _check_reasoning(item: dict[str, Any], at: str) -> None:
        """A reasoning item's shape (whatever becomes of its text): ``encrypted_content`` a string,
        ``content`` and ``summary`` lists of parts whose ``text`` is a string."""
        sealed = item.get("encrypted_content")
        if sealed is not None and not isinstance(sealed, str):
            raise bad_request(f"{at}.encrypted_content: expected a string", f"{_param(at)}.encrypted_content")
        for field_name in ("content", "summary"):
            parts = item.get(field_name)
            if parts is None:
                continue
            if not isinstance(parts, list):
                raise bad_request(f"{at}.{field_name}: expected a list of parts", f"{_param(at)}.{field_name}")
            for j, part in enumerate(parts):
                if not isinstance(part, dict) or not isinstance(part.get("text"), str):
                    raise bad_request(f"{at}.{field_name}[{j}].text: expected a string",
                                      f"{_param(at)}.{field_name}.{j}.text")

    def _reasoning_text(self, item: dict[str, Any], trusted: bool) -> str | None:
        """The reasoning an item hands back: only what this server sealed (``encrypted_content``), or
        — for items read from the tenant's own store (``trusted``), or handed back by the id of one
        toolwire stored — the text it stored. Reasoning a client wrote itself never reaches the
        prompt as the model's own thinking."""
        sealed = item.get("encrypted_content")
        if isinstance(sealed, str) and sealed.startswith(SEALED):
            text = self.signer.unseal(sealed)
            if text is not None:
                return text
        own = None
        if not trusted and isinstance(item.get("id"), str):
            self.looked += item["id"] not in self.own
            own = self.stored.get(item["id"])
        if own is not None and own.trusted and own.item.get("type") == "reasoning":
            return self._reasoning_text(own.item, True)
        if trusted:
            for field_name in ("content", "summary"):
                parts = item.get(field_name)
                if isinstance(parts, list) and parts:
                    return "".join(p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str))
            return None
        if sealed or item.get("content") or item.get("summary"):
            self.dropped_reasoning += 1
        return None

    @property
    def clean(self) -> bool:
        """Nothing is pending: the next item starts afresh (a place decoding can resume at)."""
        return not (self._text or self._calls or self._reasoning is not None)

    def decode(self, items: list[dict[str, Any]], where: str = "input", trusted: bool = False) -> None:
        for i, item in enumerate(items):
            self.item(item, f"{where}[{i}]", trusted)
        self._flush()

    def item(self, item: dict[str, Any], at: str, trusted: bool = False) -> bool:  # noqa: C901 — one branch per input item type, the table the docstring lists
        """Decode one item (a run of assistant items makes one turn, once something ends it:
        ``flush``); whether its decoding read the stored items (``stored``: then it depends on the
        store as well as on the item)."""
        kind = item.get("type")
        if not isinstance(kind, str):
            raise bad_request(f"{at}.type: expected a string naming the item type, got {shown(kind)}",
                              f"{_param(at)}.type")
        read_store = False
        if kind == "message":
            role = item.get("role")
            text, parts = _content(item.get("content"), f"{at}.content", media=role == "user")
            if role == "assistant":
                if self._calls:
                    self._flush()
                self._text.append(text)
            elif role in OWN_TURN_ROLES:
                self._flush()
                self.turns.append(Turn("user" if role == "user" else "system", text, parts=parts))
            else:
                raise bad_request(f"{at}.role: expected user, assistant, system or developer", f"{at}.role")
        elif kind == "reasoning":
            if self._calls or self._text:
                self._flush()
            self._check_reasoning(item, at)
            looked = self.looked
            thought = self._reasoning_text(item, trusted)
            read_store = self.looked > looked
            if thought is not None:
                self._reasoning = [*(self._reasoning or []), thought]
        elif kind in ("function_call", "custom_tool_call"):
            call_id, name = item.get("call_id"), item.get("name")
            if not isinstance(call_id, str) or not isinstance(name, str):
                raise bad_request(f"{at}: call_id and name are required", at)
            namespace = item.get("namespace")
            offered = self.tools.offered_name(name, namespace if isinstance(namespace, str) else None)
            if kind == "custom_tool_call":
                arguments: Any = {CUSTOM_INPUT: str(item.get("input") or "")}
            else:
                arguments = item.get("arguments") or "{}"
            self._calls.append(Call(call_id, offered, arguments))
        elif kind in TOOL_RESULTS:
            call_id = item.get("call_id")
            if not isinstance(call_id, str):
                raise bad_request(f"{at}.call_id: Field required", f"{at}.call_id")
            self._flush()
            text, parts = _content(item.get("output"), f"{at}.output")
            self.turns.append(Turn("tool", text, tool_call_id=call_id, parts=parts))
        elif kind in _SKIPPED_ITEMS:
            pass  # a hosted tool's call: toolwire ran none, and the model cannot see them
        elif kind == "item_reference":
            raise bad_request(f"{at}: an item_reference is resolved only in a request's input; send the item "
                              "itself", at)
        else:
            raise bad_request(f"{at}.type: unknown input item type {shown(kind)}", f"{at}.type")
        return read_store

    def flush(self) -> None:
        """End the run of assistant items under way (a list of items ends so)."""
        self._flush()

    def items(self, segments: list[tuple[str, list[dict[str, Any]], bool]], found: Recall | None,
              start: int = 1) -> None:
        """Decode the lists of items in ``segments`` (``(where, items, trusted)``: each ends what is
        pending) one after the other, the items' units counted from 1 (``app.prefix``; unit 0 is the
        instructions) and decoding going on at unit ``start`` (those before were taken): a run of
        items the same as an earlier request's at the same places, from a place where nothing was
        pending to the next, is taken from it; an item whose decoding read the store is never kept
        (the store may change: its unit is dropped)."""
        total = sum(len(items) for _, items, _ in segments)
        segment = base = 0  # the segment item i is in, and the index of its first item
        i = start - 1  # item i is unit i + 1
        while i < total:
            taken = found.take(i + 1) if found is not None and self.clean else None
            if taken is not None:
                self.turns.extend(taken[1])
                i = taken[0] - 1
                continue
            while i - base >= len(segments[segment][1]):
                base += len(segments[segment][1])
                segment += 1
            where, items, trusted = segments[segment]
            k = i - base
            read_store = self.item(items[k], f"{where}[{k}]", trusted)
            if k == len(items) - 1:
                self._flush()
            if found is not None:
                if read_store:
                    found.units[i + 1] = None
                found.after(len(self.turns), resumable=self.clean)
            i += 1


def conversation_turns(decoder: Decoder, instructions: str | None, ctx: Context,
                       prefix: PrefixService | None) -> tuple[list[Turn], Note | None]:
    """The request's conversation — its ``instructions``, the item lists ``ctx`` puts before the
    input (a stored chain, a conversation), the input — decoded, taking what the prefix service has
    of it (``app.prefix``): a chain it kept decoded whole (``ctx.kept``), or the units it found
    (``ctx.recall``); and the note for the pipeline."""
    kept, found = ctx.kept, ctx.recall
    if kept is not None:
        if instructions:
            decoder.turns.append(Turn("system", instructions))
        fresh = [(0, len(decoder.turns))] if decoder.turns else []
        decoder.turns.extend(kept.turns)
        begin = len(decoder.turns)
        decoder.decode(ctx.input)
        fresh.append((begin, len(decoder.turns)))
        return decoder.turns, Note(prefix, ctx.scope, [], [], [], decoder.turns, fresh, kept.render, None, [],
                                   kept.plain)
    taken = found.take(0) if found is not None else None
    first = 1
    if taken is not None:  # the instructions and perhaps the items after them
        first, turns, _ = taken
        decoder.turns.extend(turns)
    else:
        if instructions:
            decoder.turns.append(Turn("system", instructions))
        if found is not None:
            found.after(len(decoder.turns))
    decoder.items([*ctx.before, ("input", ctx.input, False)], found, first)
    return decoder.turns, found.note(decoder.turns) if found is not None else None


def responses_ask(parsed: Parsed, ctx: Context, decoder: Decoder, prefix: PrefixService | None) -> Ask:
    """The parsed request as the shared ``Ask``: its conversation decoded by ``decoder`` within what
    it builds on (``ctx``: ``conversation_turns``), the prefix service's note on it."""
    request = parsed.request
    turns, note = conversation_turns(decoder, request.instructions, ctx, prefix)
    if decoder.dropped_reasoning:
        log.info("dropped %d handed-back reasoning item(s) whose encrypted_content did not verify",
                 decoder.dropped_reasoning)
    kwargs: dict[str, Any] = {}
    thinking: bool | None = None
    effort = request.reasoning.effort if request.reasoning else None
    if effort is not None:
        thinking = effort != "none"
        if effort in EFFORT:
            kwargs["reasoning_effort"] = EFFORT[effort]
    return Ask(
        turns=turns,
        tools=parsed.tools.functions,
        tool_choice=parsed.mode,
        named_tool=parsed.named_tool,
        parallel_tool_calls=request.parallel_tool_calls is not False,
        response_format=parsed.response_format,
        sampling=Sampling(max_tokens=request.max_output_tokens, temperature=request.temperature, top_p=request.top_p),
        template_kwargs=kwargs,
        thinking=thinking,
        format_param="text.format.schema",
        prefix=note,
    )
