"""``app.api.face``: which face's error shape a path takes."""

from __future__ import annotations

from app.api.face import Face, face_for, openai_error
from app.api.server import FACES

DEFAULT = Face("process", "", (), openai_error)


def test_the_longest_matching_prefix_wins() -> None:
    names = {path: face_for(path, FACES, DEFAULT).name for path in (
        "/v1/messages", "/v1/messages/count_tokens", "/v1/messages/batches/x", "/v1/messagesX", "/v1/responses/r1",
        "/v1/chat/completions", "/v1/models", "/v1/v1/messages", "/health")}
    assert names == {"/v1/messages": "messages", "/v1/messages/count_tokens": "messages",
                     "/v1/messages/batches/x": "messages", "/v1/messagesX": "process", "/v1/responses/r1": "responses",
                     "/v1/chat/completions": "chat", "/v1/models": "process", "/v1/v1/messages": "process",
                     "/health": "process"}


def test_every_face_route_lives_under_its_prefix() -> None:
    for face in FACES:
        for route in face.routes:
            assert route.path == face.prefix or route.path.startswith(face.prefix + "/"), (face.name, route.path)
