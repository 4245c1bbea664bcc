"""``POST /v1/chat/completions``: the Chat Completions face's route.

It types the request (``parse``), decodes it into the shared ``Ask`` (``decode``) and encodes the
parser events as ``chat.completion.chunk`` SSE or one ``chat.completion`` (``encode``) — nothing
else. Streaming and non-streaming answers are the same events, so the two cannot disagree.
"""

from __future__ import annotations

from typing import Any

from starlette.responses import JSONResponse, Response

from app.api.answer import Exchange, respond
from app.api.chat.decode import chat_ask
from app.api.chat.encode import ChoiceChunks, choice_object, completion_object, finish_reason, new_completion_id
from app.api.chat.parse import parse_request
from app.api.chat.plain import plain_ask
from app.pipeline.choices import Choices
from app.pipeline.generate import Generating
from app.pipeline.logprobs import LoggedContent
from app.pipeline.run import Finished
from parsers import fold
from parsers.events import Event


async def chat_completions(body: Any, ex: Exchange[Generating]) -> Response:
    settings = ex.settings
    plain = plain_ask(body, settings)
    if plain is not None:
        ask, streaming, include_usage = plain.ask, plain.stream, plain.include_usage
    else:
        request = parse_request(body, settings, ex.tenant, ex.services.prefix, ex.elements)
        ask = chat_ask(request)
        streaming = request.stream
        include_usage = bool(request.stream_options and request.stream_options.include_usage)
    model = (await ex.ready()).name

    def early() -> ChoiceChunks:  # a stream's writer, made while the backend works on the first token
        return ChoiceChunks(new_completion_id(), model, ask.n, settings.reasoning_field, include_usage,
                            named_tool=ask.named_tool is not None)

    async def build(results: list[tuple[list[Event], Finished]], total: Finished, _: Choices) -> Response:
        bodies = []
        for index, (events, finished) in enumerate(results):
            message = fold(events)
            reason = finish_reason(finished.reason, len(message.calls), 0, ask.named_tool is not None)
            logprobs = ([entry for e in events if isinstance(e, LoggedContent) for entry in e.logprobs]
                        if ask.top_logprobs is not None else None)
            bodies.append(choice_object(index, message, reason, settings.reasoning_field, logprobs))
        return JSONResponse(completion_object(new_completion_id(), model, bodies, total.usage, total.reasoning_tokens))

    return await respond(ex, ask, stream=streaming, early=early, build=build)
