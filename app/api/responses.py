"""``/v1/responses``: the OpenAI Responses API face (Codex CLI, the Agents SDK's default model).

``POST /v1/responses`` decodes the request into the shared ``Ask`` and encodes the parser events as
Responses items (``app.api.response_items``) — streamed as ``response.*`` events, or one response
object. ``GET`` / ``DELETE /v1/responses/{id}`` and ``GET /v1/responses/{id}/input_items`` read the
response store (``app.state``).

Decoding the conversation:

* ``instructions`` is the first system text; ``developer`` and ``system`` messages are system text;
* a run of assistant items — ``reasoning``, an assistant ``message``, ``function_call`` /
  ``custom_tool_call`` — is one assistant turn (a reasoning or message item after calls starts the
  next one); ``function_call_output`` / ``custom_tool_call_output`` are tool turns answering their
  ``call_id``;
* a reasoning item's text is its ``encrypted_content`` when that was sealed by this server (clients
  that keep no state hand it back that way: ``include: ["reasoning.encrypted_content"]``), else its
  ``reasoning_text`` content, else its summary; a sealed text that does not verify is dropped;
* with ``previous_response_id`` the stored chain — each earlier response's input and output — comes
  first (instructions are not carried over, as OpenAI does).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from app.api.respond import RequestScope, start, stream_response, whole_response
from app.api.response_items import ResponseEvents, ResponseItems, finished_response, new_id
from app.api.responses_protocol import (
    CUSTOM_INPUT,
    ResponsesRequest,
    ToolSet,
    offered_tools,
    parse_request,
    response_format,
    tool_choice,
)
from app.api.thinking_signature import SEALED, ThinkingSigner, signer_for
from app.backends.base import Sampling
from app.conversation import Call, Turn
from app.errors import APIError, bad_request
from app.pipeline.ask import Ask
from app.pipeline.plan import Plan
from app.pipeline.run import Finished
from app.runtime import Runtime
from app.state import ChainLimits, StoredResponse, StoreUnavailable
from parsers.events import Event
from parsers.fold import CallHolder

log = logging.getLogger("toolwire")

EFFORT = {"minimal": "low", "low": "low", "medium": "medium", "high": "high", "xhigh": "high"}
_TEXT_PARTS = ("input_text", "output_text", "text", "summary_text", "reasoning_text")
_SKIPPED_ITEMS = frozenset({"web_search_call", "file_search_call", "computer_call", "computer_call_output",
                            "code_interpreter_call", "image_generation_call", "mcp_call", "mcp_list_tools",
                            "local_shell_call", "local_shell_call_output", "tool_search_call",
                            "tool_search_output", "compaction"})


_ID_PREFIX = {"message": "msg_", "function_call": "fc_", "function_call_output": "fco_", "reasoning": "rs_",
              "custom_tool_call": "ctc_", "custom_tool_call_output": "ctco_"}


def not_found(response_id: str) -> APIError:
    return APIError(404, f"No response found with id {response_id!r}.", code="not_found")


# --------------------------------------------------------------------------------------- input


def normalised_input(raw: str | list[Any] | None) -> list[dict[str, Any]]:
    """The request's input as items (a string is one user message), each message with an id."""
    if raw is None:
        return []
    if isinstance(raw, str):
        return [{"id": new_id("msg_"), "type": "message", "role": "user",
                 "content": [{"type": "input_text", "text": raw}]}]
    items = []
    for i, item in enumerate(raw):
        if not isinstance(item, dict):
            raise bad_request(f"input[{i}]: an item must be an object", f"input.{i}")
        if "type" not in item and "role" in item:
            item = {"type": "message", **item}
        if "id" not in item:
            kind = str(item.get("type", "item"))
            item = {"id": new_id(_ID_PREFIX.get(kind, "item_")), **item}
        items.append(item)
    return items


def _text(content: Any, where: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise bad_request(f"{where}: expected a string or a list of content parts", where)
    texts = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in _TEXT_PARTS and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif kind == "refusal" and isinstance(part.get("refusal"), str):
            texts.append(part["refusal"])
        else:
            raise bad_request(f"{where}[{j}]: content part type {kind!r} is not supported: this server renders text "
                              "only (input_text, output_text, refusal)", f"{where}.{j}")
    return "".join(texts)


class Decoder:
    """Input items → the shared conversation (see the module docstring)."""

    def __init__(self, tools: ToolSet, signer: ThinkingSigner) -> None:
        self.tools = tools
        self.signer = signer
        self.turns: list[Turn] = []
        self._text: list[str] = []
        self._calls: list[Call] = []
        self._reasoning: list[str] | None = None
        self.dropped_reasoning = 0

    def _flush(self) -> None:
        if self._text or self._calls or self._reasoning is not None:
            reasoning = "\n".join(self._reasoning) if self._reasoning is not None else None
            self.turns.append(Turn("assistant", "".join(self._text), tuple(self._calls), reasoning))
        self._text, self._calls, self._reasoning = [], [], None

    def _reasoning_text(self, item: dict[str, Any], trusted: bool) -> str | None:
        sealed = item.get("encrypted_content")
        if isinstance(sealed, str) and sealed:
            text = self.signer.unseal(sealed) if sealed.startswith(SEALED) else None
            if text is not None:
                return text
            if not trusted:
                self.dropped_reasoning += 1
        for field_name in ("content", "summary"):
            parts = item.get(field_name)
            if isinstance(parts, list) and parts:
                return "".join(p.get("text", "") for p in parts if isinstance(p, dict))
        return None

    def decode(self, items: list[dict[str, Any]], where: str = "input", trusted: bool = False) -> None:
        for i, item in enumerate(items):
            at = f"{where}[{i}]"
            kind = item.get("type")
            if kind == "message":
                role = item.get("role")
                text = _text(item.get("content"), f"{at}.content")
                if role == "assistant":
                    if self._calls:
                        self._flush()
                    self._text.append(text)
                elif role in ("user", "system", "developer"):
                    self._flush()
                    self.turns.append(Turn("user" if role == "user" else "system", text))
                else:
                    raise bad_request(f"{at}.role: expected user, assistant, system or developer", f"{at}.role")
            elif kind == "reasoning":
                if self._calls or self._text:
                    self._flush()
                thought = self._reasoning_text(item, trusted)
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
            elif kind in ("function_call_output", "custom_tool_call_output"):
                call_id = item.get("call_id")
                if not isinstance(call_id, str):
                    raise bad_request(f"{at}.call_id: Field required", f"{at}.call_id")
                self._flush()
                self.turns.append(Turn("tool", _text(item.get("output"), f"{at}.output"), tool_call_id=call_id))
            elif kind in _SKIPPED_ITEMS:
                continue  # a hosted tool's call: toolwire ran none, and the model cannot see them
            elif kind == "item_reference":
                raise bad_request(f"{at}: item_reference is not supported; send the item itself, or continue with "
                                  "previous_response_id", at)
            else:
                raise bad_request(f"{at}.type: unknown input item type {kind!r}", f"{at}.type")
        self._flush()


def store_unavailable(exc: StoreUnavailable) -> APIError:
    log.warning("response store unavailable: %s", exc)
    return APIError(503, "the response store is unavailable; retry shortly", "server_error",
                    code="store_unavailable", headers={"Retry-After": "1"})


async def history(runtime: Runtime, previous: str | None,
                  tenant: str) -> list[tuple[list[dict[str, Any]], list[dict[str, Any]]]]:
    """The stored chain before this request, oldest first: (input items, output items) per response.
    A chain that is broken (a link expired or deleted) or longer than the limits is a 4xx naming it."""
    store = runtime.responses
    if previous is None or store is None:
        return []
    s = runtime.settings
    try:
        chain = await store.chain(previous, tenant, ChainLimits(s.max_chain_links, s.max_chain_bytes))
    except StoreUnavailable as exc:
        raise store_unavailable(exc) from None
    if chain.missing == previous:
        raise APIError(404, f"Previous response with id {previous!r} not found.", param="previous_response_id",
                       code="previous_response_not_found")
    if chain.missing is not None:
        raise bad_request(f"previous_response_id: the conversation is broken: its earlier response "
                          f"{chain.missing!r} no longer exists (expired or deleted), so its history cannot be "
                          "rebuilt; send the history as input instead", "previous_response_id",
                          code="previous_response_chain_broken")
    if chain.over == "links":
        raise bad_request(f"previous_response_id: the conversation is longer than {s.max_chain_links} responses "
                          "(--max-chain-links); send the history as input instead", "previous_response_id",
                          code="previous_response_chain_too_long")
    if chain.over == "bytes":
        raise bad_request(f"previous_response_id: the stored conversation is larger than {s.max_chain_bytes} bytes "
                          "(--max-chain-bytes); send the history as input instead", "previous_response_id",
                          code="previous_response_chain_too_large")
    return [(record.input, record.response.get("output") or []) for record in chain.responses]


def responses_ask(request: ResponsesRequest, tools: ToolSet, turns: list[Turn]) -> Ask:
    mode, named = tool_choice(request.tool_choice, tools)
    kwargs: dict[str, Any] = {}
    thinking: bool | None = None
    effort = request.reasoning.effort if request.reasoning else None
    if effort is not None:
        thinking = effort != "none"
        if effort in EFFORT:
            kwargs["reasoning_effort"] = EFFORT[effort]
    return Ask(
        turns=turns,
        tools=tools.functions,
        tool_choice=mode,
        named_tool=named,
        parallel_tool_calls=request.parallel_tool_calls is not False,
        response_format=response_format(request.text),
        sampling=Sampling(max_tokens=request.max_output_tokens, temperature=request.temperature, top_p=request.top_p),
        template_kwargs=kwargs,
        thinking=thinking,
    )


def shell(request: ResponsesRequest, response_id: str, model: str) -> dict[str, Any]:
    """The response object's fields that echo the request, before any output."""
    reasoning = request.reasoning.model_dump(exclude_none=True) if request.reasoning else {}
    return {
        "id": response_id, "object": "response", "created_at": int(time.time()), "status": "in_progress",
        "background": False, "error": None, "incomplete_details": None, "instructions": request.instructions,
        "max_output_tokens": request.max_output_tokens, "model": model, "output": [],
        "parallel_tool_calls": request.parallel_tool_calls is not False,
        "previous_response_id": request.previous_response_id,
        "reasoning": {"effort": reasoning.get("effort"), "summary": reasoning.get("summary")},
        "store": request.store is not False, "temperature": request.temperature,
        "text": {"format": (request.text.format if request.text and request.text.format else {"type": "text"})},
        "tool_choice": request.tool_choice if request.tool_choice is not None else "auto",
        "tools": request.tools or [], "top_p": request.top_p, "truncation": request.truncation or "disabled",
        "usage": None, "user": request.user, "metadata": request.metadata or {},
    }


async def create_response(body: Any, runtime: Runtime, scope: RequestScope) -> Response:
    """``POST /v1/responses``: a stream of ``response.*`` events, or one response object."""
    signer = signer_for(runtime.settings)
    try:
        request = parse_request(body)
        tools = offered_tools(request.tools, runtime.settings.hosted_tools)
        decoder = Decoder(tools, signer)
        if request.instructions:
            decoder.turns.append(Turn("system", request.instructions))
        tenant = scope.tenant
        for n, (inputs, outputs) in enumerate(await history(runtime, request.previous_response_id, tenant)):
            decoder.decode(inputs, f"previous response {n} input", trusted=True)
            decoder.decode(outputs, f"previous response {n} output", trusted=True)
        items = normalised_input(request.input)
        decoder.decode(items)
        if decoder.dropped_reasoning:
            log.info("dropped %d handed-back reasoning item(s) whose encrypted_content did not verify",
                     decoder.dropped_reasoning)
        ask = responses_ask(request, tools, decoder.turns)
    except BaseException:
        scope.release()
        raise
    headers = {}
    if tools.skipped:
        skipped = ", ".join(sorted(set(tools.skipped)))
        log.warning("responses: hosted tools left out of the prompt (not run by toolwire): %s", skipped)
        headers["X-Toolwire-Warning"] = f"hosted tools not available, left out: {skipped}"
    run = await start(ask, runtime, scope)
    response_id = new_id("resp_")
    head = shell(request, response_id, runtime.model_name)
    include = set(request.include or ())
    summary = bool(request.reasoning and (request.reasoning.summary or request.reasoning.generate_summary))
    store = runtime.responses if request.store is not False else None

    async def save(final: dict[str, Any]) -> None:
        if store is not None:
            await store.put(StoredResponse(response_id, "", final, items, request.previous_response_id), tenant)

    def items_for(events: bool) -> ResponseItems:
        return ResponseItems(tools.by_offered_name, events=events, summary=summary,
                             encrypted="reasoning.encrypted_content" in include, signer=signer)

    if request.stream:
        return await stream_response(run, ResponseEvents(head, items_for(True), save), runtime, scope,
                                     headers=headers)
    final: dict[str, Any] = {}

    def answer(plan: Plan, events: list[Event], finished: Finished) -> Response:
        built = items_for(False)
        built.feed(CallHolder()(events))  # a call counts once complete; an unfinished one is its text
        final.update(finished_response(head, built, finished))
        return JSONResponse(final, headers=headers)

    response = await whole_response(run, answer, scope)
    if final:
        await save(final)
    return response


async def stored(response_id: str, runtime: Runtime, tenant: str) -> StoredResponse:
    """A stored response of ``tenant``'s (404 for any other, as for an id that does not exist)."""
    try:
        record = await runtime.responses.get(response_id, tenant) if runtime.responses else None
    except StoreUnavailable as exc:
        raise store_unavailable(exc) from None
    if record is None:
        raise not_found(response_id)
    return record


async def retrieve_response(response_id: str, runtime: Runtime, tenant: str) -> Response:
    return JSONResponse((await stored(response_id, runtime, tenant)).response)


async def delete_response(response_id: str, runtime: Runtime, tenant: str) -> Response:
    try:
        deleted = runtime.responses is not None and await runtime.responses.delete(response_id, tenant)
    except StoreUnavailable as exc:
        raise store_unavailable(exc) from None
    if not deleted:
        raise not_found(response_id)
    return JSONResponse({"id": response_id, "object": "response", "deleted": True})


async def input_items(response_id: str, request: Request, runtime: Runtime, tenant: str) -> Response:
    items = list((await stored(response_id, runtime, tenant)).input)
    if request.query_params.get("order", "desc") != "asc":
        items.reverse()
    after = request.query_params.get("after")
    if after:
        ids = [i.get("id") for i in items]
        items = items[ids.index(after) + 1:] if after in ids else []
    try:
        limit = max(1, min(100, int(request.query_params.get("limit", "20"))))
    except ValueError:
        raise bad_request("limit: expected an integer from 1 to 100", "limit") from None
    page = items[:limit]
    return JSONResponse({"object": "list", "data": page, "first_id": page[0].get("id") if page else None,
                         "last_id": page[-1].get("id") if page else None, "has_more": len(items) > limit})
