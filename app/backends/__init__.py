"""Backend clients (vLLM, llama.cpp, generic OpenAI completions) behind one interface."""

from __future__ import annotations

import httpx

from app.backends.base import Backend, Finish, GenerationRequest, Sampling, TextDelta, Usage
from app.backends.llamacpp import LlamaCppBackend
from app.backends.openai_completions import OpenAICompletionsBackend, VllmBackend

BACKEND_TYPES: dict[str, type[Backend]] = {
    "vllm": VllmBackend,
    "llamacpp": LlamaCppBackend,
    "openai": OpenAICompletionsBackend,
}


async def detect_backend_type(base_url: str, client: httpx.AsyncClient, api_key: str | None = None) -> str:
    """llama-server answers ``GET /props`` with its settings; vLLM's ``/v1/models`` says
    ``owned_by: vllm``; anything else is treated as a generic OpenAI completions API."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    base = base_url.rstrip("/")
    try:
        response = await client.get(base + "/props", headers=headers, timeout=10)
        if response.status_code == 200 and "default_generation_settings" in response.json():
            return "llamacpp"
    except (httpx.HTTPError, ValueError, TypeError):
        pass
    try:
        response = await client.get(base + "/v1/models", headers=headers, timeout=10)
        data = response.json().get("data") or []
        if any(isinstance(m, dict) and m.get("owned_by") == "vllm" for m in data):
            return "vllm"
    except (httpx.HTTPError, ValueError, AttributeError):
        pass
    return "openai"


__all__ = [
    "BACKEND_TYPES", "Backend", "Finish", "GenerationRequest", "LlamaCppBackend", "OpenAICompletionsBackend",
    "Sampling", "TextDelta", "Usage", "VllmBackend", "detect_backend_type",
]
