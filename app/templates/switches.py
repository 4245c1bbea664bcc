"""The thinking switch: reasoning turned on or off through the variables a chat template reads.

Hybrid models take the switch from their template, each under its own name: ``enable_thinking``
(Qwen3, GLM, Nemotron), ``thinking`` (DeepSeek V3.1), ``thinking_mode`` (Seed-OSS style). The names
and values are the ones ``app.templates.autodetect`` renders templates with to find their reasoning
markers. Only the variables the template actually reads are set, so a template that uses one of
these names for something else is never handed a switch it does not have. Reasoning effort is not
a switch (it is passed as ``reasoning_effort`` by the face that has one).
"""

from __future__ import annotations

from typing import Any

from jinja2 import meta

from app.templates.autodetect.render import THINKING_OFF, THINKING_ON
from app.templates.chat_template import ChatTemplate

_ON = {k: v for k, v in THINKING_ON.items() if k != "reasoning_effort"}
_OFF = dict(THINKING_OFF)
_NAMES = frozenset(_ON) | frozenset(_OFF)


def switch_names(template: ChatTemplate) -> frozenset[str]:
    """The thinking-switch variables ``template`` reads (found once, kept on the template)."""
    names = getattr(template, "_switch_names", None)
    if names is None:
        try:
            declared = meta.find_undeclared_variables(template._template.environment.parse(template.source))
        except Exception:  # noqa: BLE001 - a template that compiled parses; be safe anyway
            declared = set()
        names = frozenset(declared & _NAMES)
        template._switch_names = names  # type: ignore[attr-defined]
    return names


def thinking_kwargs(template: ChatTemplate, thinking: bool | None) -> dict[str, Any]:
    """Template variables that turn reasoning on (``True``) or off (``False``); ``None``: the
    template's default (nothing set)."""
    if thinking is None:
        return {}
    names = switch_names(template)
    values = _ON if thinking else _OFF
    return {k: v for k, v in values.items() if k in names}
