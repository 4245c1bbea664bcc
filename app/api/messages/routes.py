"""``POST /v1/messages`` and ``/v1/messages/count_tokens``: the Anthropic Messages face's routes.

They decode the request into the shared ``Ask`` (``decode``) and encode the parser events as
Anthropic's SSE events or one ``message`` (``encode``) — nothing else.
"""

from __future__ import annotations

from typing import Any

from starlette.responses import JSONResponse, Response

from app.api.answer import Exchange, respond, until_gone
from app.api.messages.decode import messages_ask, omits_thinking
from app.api.messages.encode import PING, MessageBuilder, MessageEvents, new_message_id
from app.api.messages.parse import parse
from app.api.messages.protocol import Conversation, MessagesRequest
from app.pipeline.choices import Choices
from app.pipeline.generate import plan
from app.pipeline.literal import count_prompt
from app.pipeline.run import Finished
from app.services import Answering
from parsers.events import Event
from parsers.fold import CallHolder


async def create_message(body: Any, ex: Exchange[Answering]) -> Response:
    """``POST /v1/messages``: a stream of message events, or one message."""
    signer = ex.signer
    request = parse(MessagesRequest, body, ex.settings, ex.tenant, ex.services.prefix, ex.elements)
    ask = messages_ask(request, signer)
    model = (await ex.ready()).name
    omit = omits_thinking(request)
    if request.stream:
        return await respond(ex, ask, stream=True, schema_key="input_schema", ping=PING, encoder=lambda choices: (
            MessageEvents(new_message_id(), model, signer, omit, choices.runs[0].prompt_tokens)))

    async def build(results: list[tuple[list[Event], Finished]], total: Finished, choices: Choices) -> Response:
        builder = MessageBuilder(signer, omit)
        builder.feed(CallHolder()(results[0][0]))  # a call counts once complete; an unfinished one is its text
        return JSONResponse(builder.message(new_message_id(), model, total, choices.runs[0].prompt_tokens))

    return await respond(ex, ask, stream=False, schema_key="input_schema", build=build)


async def count_tokens(body: Any, ex: Exchange[Answering]) -> Response:
    """``POST /v1/messages/count_tokens``: the rendered prompt's length by the model's tokenizer (in
    process where there is one, else the backend's), as the backend will read it."""
    request = parse(Conversation, body, ex.settings, ex.tenant, ex.services.prefix, ex.elements)
    ask = messages_ask(request, ex.signer)

    async def count() -> int:
        model = await ex.ready()
        planned = await plan(ask, model, ex.services, "input_schema")
        return await count_prompt(planned, model)

    return JSONResponse({"input_tokens": await until_gone(ex, count())})
