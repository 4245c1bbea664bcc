"""A face: one API toolwire speaks (Chat Completions, the Responses API, the Messages API, legacy
completions), as the server mounts it — its routes, and the shape its errors take.

A ``Route`` is a path, its methods and a handler; a face's exchanges carry the part of the process's
services it uses (``needs``). A ``generate`` route reads a JSON body and holds a
concurrency slot for the exchange (``handler(body, exchange)``); a ``body`` route reads a JSON body
too, without a slot (``handler(body, exchange)``); any other route is handed the exchange alone
(``handler(exchange)``). ``path`` is also the route's label in the metrics. A face's
``error_response`` renders every error on its paths — refusals at the edge (401, 415, 429), bad
requests, 404 and 405 for paths it does not serve — in its own API's shape.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from starlette.responses import JSONResponse, Response

from app.api.answer import Exchange
from app.errors import APIError

Handler = Callable[..., Awaitable[Response]]


@dataclass(frozen=True)
class Route:
    path: str
    methods: tuple[str, ...]
    handler: Handler
    generate: bool = False  # reads a JSON body and holds a concurrency slot
    body: bool = False  # reads a JSON body (no slot: the route does not generate)
    #: the body's list a conversation grows in (``messages``, ``input``): parsed past what an earlier
    #: body of the conversation held (``app.prefix.PrefixService.read_body``), its elements' JSON
    #: on the exchange (``Exchange.elements``)
    grows: str | None = None


def _whole(services: Any) -> Any:
    return services


@dataclass(frozen=True)
class Face:
    name: str
    prefix: str  # the paths whose errors take this face's shape
    routes: tuple[Route, ...]
    error_response: Callable[[APIError], Response]
    #: the part of the process's services its exchanges carry (``app.services``: what it uses)
    needs: Callable[[Any], Any] = _whole


def openai_error(exc: APIError) -> JSONResponse:
    """An error as an OpenAI error object."""
    return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers or None)


def face_for(path: str, faces: Sequence[Face], default: Face) -> Face:
    """The face whose error shape ``path`` takes: the one with the longest matching prefix."""
    best = default
    for face in faces:
        if (path == face.prefix or path.startswith(face.prefix + "/")) and len(face.prefix) > len(best.prefix):
            best = face
    return best


__all__ = ["Exchange", "Face", "Handler", "Route", "face_for", "openai_error"]
