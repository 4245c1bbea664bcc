"""The legacy completions face: ``POST /v1/completions``, passed through to the backend (``routes``)."""

from app.api.completions.routes import completions
from app.api.face import Face, Route, openai_error
from app.services import Services

FACE = Face("completions", "/v1/completions",
            (Route("/v1/completions", ("POST",), completions, generate=True),), openai_error, Services.settled)
