"""Backend clients (vLLM, llama.cpp, generic OpenAI completions) behind one interface."""

from __future__ import annotations

import httpx

from app.backends.base import Backend, Finish, GenerationRequest, Sampling, TextDelta, Usage, probe_timeout
from app.backends.llamacpp import LlamaCppBackend
from app.backends.openai_completions import OpenAICompletionsBackend, VllmBackend

BACKEND_TYPES: dict[str, type[Backend]] = {
    "vllm": VllmBackend,
    "llamacpp": LlamaCppBackend,
    "openai": OpenAICompletionsBackend,
}


async def detect_backend_type(base_url: str, client: httpx.AsyncClient, api_key: str | None = None) -> str | None:
    """llama-server answers ``GET /props`` with its settings; vLLM's ``/v1/models`` says
    ``owned_by: vllm``; anything else that answers is a generic OpenAI completions API.
    ``None`` when the backend does not answer at all (try again later)."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    base = base_url.rstrip("/")
    timeout = probe_timeout(client)
    answered = False
    try:
        response = await client.get(base + "/props", headers=headers, timeout=timeout)
        answered = True
        if response.status_code == 200 and "default_generation_settings" in response.json():
            return "llamacpp"
    except httpx.TransportError:
        pass
    except (httpx.HTTPError, ValueError, TypeError):
        answered = True
    try:
        response = await client.get(base + "/v1/models", headers=headers, timeout=timeout)
        answered = True
        data = response.json().get("data") or []
        if any(isinstance(m, dict) and m.get("owned_by") == "vllm" for m in data):
            return "vllm"
    except httpx.TransportError:
        pass
    except (httpx.HTTPError, ValueError, AttributeError):
        answered = True
    return "openai" if answered else None


__all__ = [
    "BACKEND_TYPES", "Backend", "Finish", "GenerationRequest", "LlamaCppBackend", "OpenAICompletionsBackend",
    "Sampling", "TextDelta", "Usage", "VllmBackend", "detect_backend_type",
]
