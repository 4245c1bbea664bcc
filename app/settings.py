"""Settings: every ``toolwire serve`` flag, also readable from a ``TOOLWIRE_*`` environment variable.

Precedence: command-line flag > environment variable > default. Lists (``TOOLWIRE_API_KEY``)
are comma-separated in the environment.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from app.backends import BACKEND_TYPES

ReasoningField = Literal["reasoning_content", "reasoning", "both"]


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="TOOLWIRE_", extra="ignore")

    # backend
    backend: str | None = Field(None, description="base URL of the raw-completion backend, e.g. http://vllm:8000")
    backend_type: str | None = Field(
        None, description=f"{' | '.join(BACKEND_TYPES)} (default: detected by probing the backend)",
        json_schema_extra={"choices": list(BACKEND_TYPES)})
    backend_api_key: SecretStr | None = Field(None, description="bearer token sent to the backend (never logged)")
    local_model: Path | None = Field(None, description="start a managed llama-server on this GGUF file")
    llama_server: Path | None = Field(None, description="llama-server binary for --local-model (default: cache, PATH)")
    local_ctx: int = Field(4096, description="context size of the managed llama-server")
    local_threads: int | None = Field(None, description="threads of the managed llama-server (default: all cores)")

    # model and parsing
    model: str | None = Field(None, description="model name served on /v1/models (default: the backend's)")
    chat_template: Path | None = Field(
        None, description="a .jinja file, tokenizer_config.json or model directory (llama.cpp default: GET /props)")
    reasoning_parser: str | None = Field(None, description="reasoning parser name (see `toolwire parsers`), auto, or none")
    tool_call_parser: str | None = Field(None, description="tool-call parser name (see `toolwire parsers`), auto, or none")
    response_schema: Path | None = Field(
        None, description="JSON file with a transformers response_schema (for --tool-call-parser response-schema)")
    reasoning_field: ReasoningField = Field(
        "reasoning_content", description="delta field for reasoning: reasoning_content | reasoning | both")
    vllm_legacy_guided: bool = Field(
        False, description="send vLLM constraints as guided_json (vLLM < 0.12) instead of structured_outputs")
    control_text: Literal["auto", "escape", "reject", "allow"] = Field(
        "auto", description="client text holding a control token's string (<|im_end|>, [INST] …): auto sends "
        "the prompt so it stays text — in tokens on llama.cpp, and on vLLM with the model's tokenizer.json "
        "(--chat-template DIR) — else escapes it; escape: a zero-width space after its first character; reject: "
        "400; allow: sent as is, where the model reads it as control tokens (unsafe)")
    hold_tool_calls: bool = Field(
        False, description="deliver each streamed tool call whole, once complete (never a partial call)")
    thinking_secret: SecretStr | None = Field(
        None, description="key that signs the Messages API's thinking blocks, so a client cannot hand back "
        "reasoning toolwire did not write (default: random per process; set it to keep signatures valid "
        "across restarts and replicas)")

    # Responses API state
    state_dir: Path = Field(
        default_factory=lambda: Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state") / "toolwire",
        description="folder for the embedded response store (created on start)")
    response_store: str | None = Field(
        None, description="where stored responses live: a SQLite file in --state-dir (default), or redis://HOST:PORT/DB "
        "shared by several replicas")
    response_ttl: float = Field(
        30 * 24 * 3600, gt=0, description="seconds a stored response is kept (a conversation: after its last write)")
    response_store_max: int = Field(
        100_000, ge=1, description="most responses and conversations the store keeps (oldest go first)")
    response_store_max_bytes: int = Field(
        1 << 30, ge=1 << 20, description="most bytes of stored responses and conversations the store keeps (oldest "
        "go first)")
    conversation_max_items: int = Field(
        10_000, ge=1, description="most items one conversation holds (a write past it: 400)")
    conversation_max_bytes: int = Field(
        16 << 20, ge=1 << 16, description="most bytes of items one conversation holds, all of which a response in it "
        "reads (a write past it: 400)")
    max_chain_links: int = Field(
        256, ge=1, le=900, description="most earlier responses one previous_response_id continuation reads")
    max_chain_bytes: int = Field(
        16 << 20, ge=1 << 16, description="most bytes of stored responses one continuation reads (beyond: 400)")
    max_chain_items: int = Field(
        10_000, ge=1, description="most input and output items of stored responses one continuation decodes "
        "(beyond: 400)")
    max_stored_response_bytes: int = Field(
        8 << 20, ge=1 << 16, description="most bytes one stored response may hold, input and output (input alone "
        "beyond it: 413 before generating; with the output beyond it: answered but not stored)")
    max_background: int = Field(
        32, ge=0, description="background responses (background: true) generating at once in this process; beyond "
        "it answer 429 (0: background responses are refused with a 400)")
    background_stale_seconds: float = Field(
        30.0, ge=2, description="a background response whose replica has not written to the store for this long "
        "(it stopped or lost the store) is reported, and stored, as failed")
    background_events_max_bytes: int = Field(
        8 << 20, ge=64 << 10, description="most bytes of events kept per background response for resuming its "
        "stream (GET ?stream=true); past it the response goes on but its stream cannot be resumed further")
    # images and documents (app.media)
    max_media_items: int = Field(
        32, ge=0, description="most images and documents one request holds, those of stored responses and "
        "conversations it continues included (beyond: 400)")
    max_media_bytes: int = Field(
        20 << 20, ge=1024, description="most bytes of images and documents (decoded) one request holds, fetched ones "
        "and those of stored responses included (beyond: 400)")
    media_domains: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="hosts whose http(s) image URLs toolwire fetches (repeatable; "
        "*.example.com: its subdomains; *: any host; default: none — only data URLs and base64)")
    media_allow_private: bool = Field(
        False, description="let --media-domains hosts resolve to private, loopback and link-local addresses")
    media_fetch_timeout: float = Field(10.0, gt=0, description="seconds one image URL's fetch may take")
    store_timeout: float = Field(
        2.0, gt=0, description="seconds one operation of a Redis response store may take (each command's socket "
        "timeout too); past it the request that needed it answers 503 store_unavailable (a finished answer is "
        "still returned, not stored)")
    store_check_interval: float = Field(
        1.0, gt=0, description="seconds between background checks of the response store; /readyz and /health "
        "report the last one and never wait on the store, and while the store breaker is open the check is its "
        "probe (an answer closes it)")
    store_check_timeout: float = Field(
        0.5, gt=0, description="seconds a background check of the response store may take before it counts as "
        "failed")
    store_breaker_failures: int = Field(
        3, ge=1, description="store timeouts in a row (calls or checks that got no answer in time) that open the "
        "store breaker: store calls are then refused at once (503 store_unavailable) until a check gets an "
        "answer")
    hosted_tools: Literal["ignore", "reject"] = Field(
        "ignore", description="Responses API tools toolwire cannot run (web_search, file_search, …): left out of "
        "the prompt with a warning (ignore) or answered with a 400 (reject)")

    # HTTP edge
    host: str = Field("127.0.0.1", description="address to listen on")
    port: int = Field(8000, description="port to listen on")
    workers: int = Field(1, ge=1, description="uvicorn worker processes")
    api_key: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="accepted bearer API key on /v1/* (repeatable; env: comma-separated)")
    api_keys_file: Path | None = Field(None, description="file with one accepted API key per line")
    metrics_open: bool = Field(False, description="serve /metrics without an API key")
    openapi: bool = Field(False, description="serve an OpenAPI document of toolwire's API at /openapi.json "
                          "(behind the API keys when keys are set)")
    cors_origins: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="allowed CORS origins (default: CORS off)")

    # robustness
    connect_timeout: float = Field(10.0, gt=0, description="seconds to connect to the backend")
    read_timeout: float = Field(300.0, gt=0, description="seconds of backend silence before a stream is failed")
    retries: int = Field(2, ge=0, description="retries of a backend request before its first byte (safe errors only)")
    max_concurrency: int | None = Field(None, ge=1, description="concurrent requests; beyond it answer 429")
    max_body_bytes: int = Field(4_000_000, ge=1024, description="largest accepted request body")
    max_messages: int = Field(2048, ge=1, description="most messages in one request")
    max_input_items: int = Field(
        10_000, ge=1, description="most items one request's conversation holds: Responses input items, Messages "
        "content blocks, Chat Completions content parts and tool calls (counted before decoding)")
    max_tools: int = Field(256, ge=1, description="most tools in one request")
    max_tool_schema_bytes: int = Field(
        65_536, ge=256, description="largest JSON schema of one tool or one response format")
    max_tokens_cap: int | None = Field(None, ge=1, description="upper bound applied to max_tokens")
    max_tokens_policy: Literal["clamp", "reject"] = Field(
        "clamp", description="a max_tokens above --max-tokens-cap or beyond what the backend's context holds after "
        "the prompt: lowered, said in the X-Toolwire-Max-Tokens header (clamp), or a 400 for the cap and the "
        "backend's own answer for the context (reject)")
    max_choices: int = Field(8, ge=1, description="most answers (n) one Chat Completions request may ask for")
    max_calls_per_answer: int = Field(
        1024, ge=1, description="tool calls one answer may hold; the text of any beyond is content (logged)")
    header_timeout: float = Field(10.0, gt=0, description="seconds a connection has to send a request's headers")
    max_header_bytes: int = Field(
        64 * 1024, ge=1024, description="bytes a request's head (request line and headers) may hold; beyond: 431")
    max_headers: int = Field(100, ge=8, description="headers a request may send; beyond: 431")
    body_timeout: float = Field(60.0, gt=0, description="seconds a client has to send a request's body")
    max_connections: int = Field(4096, ge=1, description="open connections at most; beyond them new ones get 503")
    prefix_cache_bytes: int = Field(
        64 * 1024 * 1024, ge=0, description="bytes the server keeps of conversations' earlier turns — their "
        "decoded messages, rendered template loops and encoded tool schemas — so an agent's next turn redoes only "
        "what differs, on every API (one budget for the whole server, its uvicorn workers sharing it; 0: off; "
        "see README)")
    max_render_ms: float = Field(
        3000, gt=0, description="CPU time a large request's checks and render may use in a worker process "
        "(beyond: 400, and the worker is replaced); the loop keeps serving meanwhile")
    prepare_workers: int = Field(
        2, ge=1, le=64, description="worker processes that check and render large requests (each a fork of a "
        "preloaded server process)")
    max_queue_ms: float = Field(
        15_000, gt=0, description="longest a large request waits for a free worker (beyond: 503 server_busy)")
    drain_seconds: float = Field(
        5.0, ge=0, description="on SIGTERM, seconds to keep serving while /readyz says draining (so a load "
        "balancer stops sending here) before shutting down")
    shutdown_grace: float = Field(10.0, ge=0, description="seconds to drain in-flight streams on shutdown")
    sched_slice_us: int | None = Field(
        None, ge=100, le=100_000, description="Linux ≥ 6.12: ask for this scheduler slice (µs) so processes sharing "
        "toolwire's CPUs (e.g. the client) are not held up behind its parsing; 100 suits a shared box")

    # logs
    log_level: str = Field("info", description="debug | info | warning | error")
    log_content: bool = Field(False, description="log prompt and completion text (debug only)")

    @field_validator("reasoning_parser", "tool_call_parser")
    @classmethod
    def _auto_alias(cls, value: str | None) -> str | None:
        """SGLang's ``response_template`` (a parser driven by the checkpoint's own description of
        its output) is ``auto`` here: the format is learned from the chat template; ``none`` is no
        parser (llama.cpp's ``reasoning_format: none``)."""
        from parsers.registry import means_auto, means_none

        return "auto" if means_auto(value) else None if means_none(value) else value

    @field_validator("backend_type")
    @classmethod
    def _known_backend_type(cls, value: str | None) -> str | None:
        if value is not None and value not in BACKEND_TYPES:
            raise ValueError(f"unknown backend type {value!r}; known: {', '.join(BACKEND_TYPES)}")
        return value

    @field_validator("api_key", "cors_origins", "media_domains", mode="before")
    @classmethod
    def _split_list(cls, value: object) -> object:
        """A list from the environment: a JSON array (how ``toolwire serve`` hands lists to its
        workers, so a key holding a comma stays one key), else comma-separated values."""
        if isinstance(value, str):
            if value.lstrip().startswith("["):
                try:
                    items = json.loads(value)
                except ValueError:
                    items = None
                if isinstance(items, list) and all(isinstance(i, str) for i in items):
                    return items
            return [v.strip() for v in value.split(",") if v.strip()]
        return value

    def accepted_keys(self) -> list[str]:
        keys = list(self.api_key)
        if self.api_keys_file is not None:
            lines = self.api_keys_file.read_text(encoding="utf-8").splitlines()
            keys += [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]
        return keys
