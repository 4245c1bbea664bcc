"""Raw-completion backends (vLLM, llama.cpp, generic OpenAI completions) behind one interface.

``BACKEND_TYPES`` is the one table of backend kinds: ``--backend-type`` accepts its names, and
``detect_backend_type`` tries its dialects in order. A ``Backend`` is a base URL plus one of
these dialects (``app.backends.dialect``); the I/O is shared (``app.backends.base``).
"""

from __future__ import annotations

from typing import Any

import httpx

from app.backends.base import Backend, probe_timeout
from app.backends.dialect import BackendFacts, Dialect
from app.backends.generation import Finish, GenerationRequest, Sampling, TextDelta, Usage
from app.backends.llamacpp import LlamaCpp
from app.backends.openai_completions import OpenAICompletions
from app.backends.vllm import Vllm

#: backend kinds by name, in the order ``detect_backend_type`` tries them; the last, which
#: recognises nothing, is what any other answering backend is taken for
BACKEND_TYPES: dict[str, type[Dialect]] = {d.kind: d for d in (Vllm, LlamaCpp, OpenAICompletions)}


def LlamaCppBackend(base_url: str, client: httpx.AsyncClient, api_key: str | None = None) -> Backend:
    """A ``Backend`` speaking llama-server's dialect (the class of that name before dialects; kept
    for its callers)."""
    return Backend(base_url, client, api_key, dialect=LlamaCpp())


async def detect_backend_type(base_url: str, client: httpx.AsyncClient, api_key: str | None = None) -> str | None:
    """The first kind of ``BACKEND_TYPES`` that recognises what the backend answers on its ``sniff``
    path; a backend that answers but is recognised by none is the fallback kind (``openai``).
    ``None`` when the backend does not answer at all (try again later)."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    base = base_url.rstrip("/")
    timeout = probe_timeout(client)
    answered = False
    answers: dict[str, Any] = {}
    fallback = None
    for kind, dialect in BACKEND_TYPES.items():
        path = dialect.sniff
        if path is None:
            fallback = fallback or kind
            continue
        if path not in answers:
            answers[path] = None
            try:
                response = await client.get(base + path, headers=headers, timeout=timeout)
                answered = True
                answers[path] = response.json() if response.status_code == 200 else None
            except httpx.TransportError:
                pass
            except (httpx.HTTPError, ValueError):
                answered = True
        if dialect.recognises(answers[path]):
            return kind
    return fallback if answered else None


__all__ = [
    "BACKEND_TYPES", "Backend", "BackendFacts", "Dialect", "Finish", "GenerationRequest", "LlamaCppBackend",
    "Sampling", "TextDelta", "Usage", "detect_backend_type",
]
