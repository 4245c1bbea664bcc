"""The Anthropic Messages face: ``/v1/messages`` and ``/v1/messages/count_tokens`` (``protocol``,
``parse``, ``decode``, ``encode``, ``routes``); every error on its paths in Anthropic's shape."""

from app.api.face import Face, Route
from app.api.messages.protocol import error_response
from app.api.messages.routes import count_tokens, create_message
from app.services import Services

FACE = Face("messages", "/v1/messages", (
    Route("/v1/messages", ("POST",), create_message, generate=True, grows="messages"),
    Route("/v1/messages/count_tokens", ("POST",), count_tokens, generate=True, grows="messages"),
), error_response, Services.answering)
