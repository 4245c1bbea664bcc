"""The OpenAI Responses API face: ``/v1/responses`` and its stored responses (``protocol``,
``parse``, ``context``, ``decode``, ``history``, ``encode``, ``keep``, ``routes``; background
responses: ``background``, ``follow``)."""

from app.api.face import Face, Route, openai_error
from app.api.responses.routes import (
    cancel_response,
    create_response,
    delete_response,
    input_items,
    retrieve_response,
)
from app.services import Services

FACE = Face("responses", "/v1/responses", (
    Route("/v1/responses", ("POST",), create_response, generate=True, grows="input"),
    Route("/v1/responses/{id}", ("GET",), retrieve_response),
    Route("/v1/responses/{id}", ("DELETE",), delete_response),
    Route("/v1/responses/{id}/input_items", ("GET",), input_items),
    Route("/v1/responses/{id}/cancel", ("POST",), cancel_response),
), openai_error, Services.responding)
