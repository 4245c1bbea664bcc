"""``POST /v1/messages`` and ``/v1/messages/count_tokens``: the Anthropic Messages face's routes.

They decode the request into the shared ``Ask`` (``decode``) and encode the parser events as
Anthropic's SSE events or one ``message`` (``encode``) — nothing else.
"""

from __future__ import annotations

from typing import Any

from starlette.responses import JSONResponse, Response

from app.api.answer import Exchange, plan, start, stream, until_gone, whole
from app.api.messages.decode import messages_ask, omits_thinking
from app.api.messages.encode import PING, MessageBuilder, MessageEvents, new_message_id
from app.api.messages.protocol import Conversation, MessagesRequest, parse
from app.pipeline.literal import count_prompt
from app.pipeline.run import Finished
from parsers.events import Event
from parsers.fold import CallHolder


async def create_message(body: Any, ex: Exchange) -> Response:
    """``POST /v1/messages``: a stream of message events, or one message."""
    signer = ex.signer
    request: MessagesRequest = parse(MessagesRequest, body, ex.settings)
    ask = messages_ask(request, signer)
    choices = await start(ask, ex, schema_key="input_schema")
    model = (await ex.ready()).name
    omit = omits_thinking(request)
    prompt_tokens = choices.runs[0].prompt_tokens
    if request.stream:
        encoder = MessageEvents(new_message_id(), model, signer, omit, prompt_tokens)
        return await stream(choices, encoder, ex, ping=PING)

    async def build(results: list[tuple[list[Event], Finished]], total: Finished) -> Response:
        builder = MessageBuilder(signer, omit)
        builder.feed(CallHolder()(results[0][0]))  # a call counts once complete; an unfinished one is its text
        return JSONResponse(builder.message(new_message_id(), model, total, prompt_tokens))

    return await whole(choices, build, ex)


async def count_tokens(body: Any, ex: Exchange) -> Response:
    """``POST /v1/messages/count_tokens``: the rendered prompt's length by the model's tokenizer (in
    process where there is one, else the backend's), as the backend will read it."""
    request: Conversation = parse(Conversation, body, ex.settings)
    ask = messages_ask(request, ex.signer)

    async def count() -> int:
        planned, model = await plan(ask, ex, "input_schema")
        return await count_prompt(planned, model)

    return JSONResponse({"input_tokens": await until_gone(ex, count())})
