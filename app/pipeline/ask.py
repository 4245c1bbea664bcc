"""What every API face decodes its request into (see ``app.pipeline``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from app.backends.base import Sampling
from app.conversation import Turn

ToolChoice = Literal["none", "auto", "required"]


@dataclass
class Ask:
    """One generation request, whichever API it came through.

    ``tools`` are OpenAI function tools (``{"type": "function", "function": {...}}``) as offered;
    ``tool_choice`` is ``None`` when the client did not say (``auto`` with tools, ``none`` without);
    ``named_tool`` forces one tool by name. ``response_format`` is Chat Completions' shape
    (``{"type": "json_schema", "json_schema": {"schema": …}}``). ``template_kwargs`` reach the chat
    template (``enable_thinking``, ``reasoning_effort``, …). ``hold_tool_calls`` ``None`` means the
    server's setting. ``thinking`` turns reasoning on or off through whichever switch the template
    reads (``None``: the template's default; explicit ``template_kwargs`` win); ``thinking_budget``
    caps the reasoning block's tokens where the backend can enforce it. ``top_logprobs`` ``None``
    means no logprobs; a number asks for each content token's logprob and that many alternatives.
    ``n`` answers are generated from the one prompt, each parsed on its own.
    """

    turns: list[Turn]
    tools: list[dict[str, Any]] = field(default_factory=list)
    tool_choice: ToolChoice | None = None
    named_tool: str | None = None
    parallel_tool_calls: bool = True
    response_format: dict[str, Any] | None = None
    sampling: Sampling = field(default_factory=Sampling)
    template_kwargs: dict[str, Any] = field(default_factory=dict)
    hold_tool_calls: bool | None = None
    thinking: bool | None = None
    thinking_budget: int | None = None
    top_logprobs: int | None = None
    n: int = 1
