"""The Chat Completions face: ``POST /v1/chat/completions`` (``protocol``, ``parse``, ``decode``,
``encode``, ``routes``)."""

from app.api.chat.routes import chat_completions
from app.api.face import Face, Route, openai_error
from app.services import Services

FACE = Face("chat", "/v1/chat/completions",
            (Route("/v1/chat/completions", ("POST",), chat_completions, generate=True,
                   grows="messages"),), openai_error,
            Services.generating)
