"""Hugging Face chat templates: loading and rendering with HF's semantics, in jinja2's sandbox.

Rendering matches ``transformers``' ``apply_chat_template``: ``trim_blocks`` and ``lstrip_blocks``,
the ``loopcontrols`` extension, a no-op ``{% generation %}`` block, ``raise_exception``,
``strftime_now``, and a ``tojson`` filter that keeps non-ASCII text (``ensure_ascii=False``) and
accepts ``indent``, ``separators`` and ``sort_keys``. ``chat_template_kwargs`` are merged into the
context (``enable_thinking``, ``reasoning_effort``, …).

Tool-call arguments arrive from clients as JSON text; templates disagree on what they expect
(``arguments | tojson``, ``arguments.items()``, ``'```json\\n' + arguments``, ``{{ arguments }}``).
They are rendered as ``JsonArguments``: a dict that also behaves like its JSON text where a
string is expected, so every style renders the same arguments.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from datetime import datetime
from pathlib import Path
from typing import Any

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension
from jinja2.sandbox import SandboxedEnvironment, modifies_known_mutable


class TemplateError(ValueError):
    """The template refused the conversation (``raise_exception``) or failed to render."""


class JsonArguments(dict[str, Any]):
    """Tool-call arguments: a mapping that renders, prints and concatenates as its JSON text."""

    def __str__(self) -> str:
        return json.dumps(self, ensure_ascii=False)

    def __add__(self, other: Any) -> Any:
        return str(self) + other if isinstance(other, str) else NotImplemented

    def __radd__(self, other: Any) -> Any:
        return other + str(self) if isinstance(other, str) else NotImplemented


class _GenerationBlock(Extension):
    """``{% generation %}…{% endgeneration %}`` (HF's assistant-mask marker) renders its body."""

    tags = {"generation"}  # noqa: RUF012 - jinja reads it as a class attribute

    def parse(self, parser: Any) -> nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.Scope(body, lineno=lineno)


def _raise_exception(message: str) -> None:
    raise TemplateError(message)


def _json_default(value: Any) -> Any:
    """What ``tojson`` makes of values JSON has no spelling for: an undefined value is ``null``;
    a generator or other iterable (``tools | map(attribute='function')``) is a list."""
    if isinstance(value, jinja2.Undefined):
        return None
    if isinstance(value, Iterable) and not isinstance(value, (str, bytes)):
        return list(value)
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None,
            separators: tuple[str, str] | None = None, sort_keys: bool = False) -> str:
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys,
                      default=_json_default)


def _now() -> datetime:
    """The clock templates see through ``strftime_now`` (tests pin it)."""
    return datetime.now()


def _strftime_now(fmt: str) -> str:
    return _now().strftime(fmt)


#: ids of the lists, dicts and sets the caller handed the render being run (see ``_Sandbox``)
_caller_owned: ContextVar[frozenset[int]] = ContextVar("caller_owned", default=frozenset())


def _container_ids(value: Any) -> Iterator[int]:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, Mapping):
            yield id(item)
            stack.extend(item.values())
        elif isinstance(item, (list, tuple, set, frozenset)):
            yield id(item)
            stack.extend(item)


class _Sandbox(SandboxedEnvironment):
    """Jinja's sandbox, where a template may change the lists and dicts it made itself (Kimi K2's
    templates build lists with ``.append``) but never one the caller handed it: messages, tools and
    keyword arguments stay as given, as in jinja's immutable sandbox."""

    def is_safe_attribute(self, obj: Any, attr: str, value: Any) -> bool:
        if not super().is_safe_attribute(obj, attr, value):
            return False
        return not (modifies_known_mutable(obj, attr) and id(obj) in _caller_owned.get())


def _environment() -> jinja2.Environment:
    env = _Sandbox(
        trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols", _GenerationBlock]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


def _as_arguments(arguments: Any) -> Any:
    if isinstance(arguments, Mapping):
        return JsonArguments(arguments)
    if isinstance(arguments, str):
        try:
            value = json.loads(arguments)
        except (ValueError, RecursionError):  # not JSON (or too deep to be: the checks bound real arguments)
            return arguments
        if isinstance(value, dict):
            return JsonArguments(value)
    return arguments


def prepare_messages(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Messages as templates expect them: tool-call arguments as ``JsonArguments``; reasoning
    (``reasoning_content``, ``thinking`` or ``reasoning``) also as ``reasoning_content`` and
    ``thinking``."""
    prepared = []
    for message in messages:
        msg = dict(message)
        if msg.get("tool_calls"):
            calls = []
            for call in msg["tool_calls"]:
                call = dict(call)
                function = dict(call.get("function") or {})
                if "arguments" in function:
                    function["arguments"] = _as_arguments(function["arguments"])
                call["function"] = function
                # some templates read tool_call.name / tool_call.arguments directly
                call.setdefault("name", function.get("name"))
                call.setdefault("arguments", function.get("arguments"))
                calls.append(call)
            msg["tool_calls"] = calls
        reasoning = next((msg[k] for k in ("reasoning_content", "thinking", "reasoning") if msg.get(k) is not None),
                         None)
        if reasoning is not None:  # as transformers does: gpt-oss templates read ``thinking``
            msg.setdefault("thinking", reasoning)
            msg["reasoning_content"] = reasoning
        prepared.append(msg)
    return prepared


class ChatTemplate:
    """One compiled chat template plus the special tokens it is rendered with."""

    def __init__(self, source: str, bos_token: str = "", eos_token: str = "", name: str = "template") -> None:
        self.source = source
        self.bos_token = bos_token
        self.eos_token = eos_token
        self.name = name
        try:
            self._template = _environment().from_string(source)
        except jinja2.TemplateSyntaxError as exc:
            raise TemplateError(f"chat template {name} does not compile: {exc}") from exc

    def render(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None = None,
               add_generation_prompt: bool = True, **kwargs: Any) -> str:
        """Render a conversation; raises ``TemplateError`` with the template's own message."""
        context = {
            "bos_token": self.bos_token,
            "eos_token": self.eos_token,
            **{k: v for k, v in kwargs.items() if v is not None},
            "messages": prepare_messages(messages),
            "tools": list(tools) if tools is not None else None,
            "add_generation_prompt": add_generation_prompt,
        }
        token = _caller_owned.set(frozenset(_container_ids(context)))
        try:
            return self._template.render(**context)
        except TemplateError:
            raise
        except jinja2.TemplateError as exc:
            raise TemplateError(f"chat template failed: {exc}") from exc
        except (TypeError, ValueError, KeyError, AttributeError, IndexError) as exc:
            raise TemplateError(f"chat template failed: {type(exc).__name__}: {exc}") from exc
        finally:
            _caller_owned.reset(token)

    @classmethod
    def load(cls, path: str | Path) -> ChatTemplate:
        """From a ``.jinja`` file, a ``tokenizer_config.json``, or a model directory holding either
        (``chat_template.jinja`` is preferred, as transformers does)."""
        path = Path(path)
        if path.is_dir():
            for candidate in ("chat_template.jinja", "tokenizer_config.json", "chat_template.json"):
                if (path / candidate).is_file():
                    template = cls.load(path / candidate)
                    config = path / "tokenizer_config.json"
                    if candidate == "chat_template.jinja" and config.is_file():
                        bos, eos = _special_tokens(json.loads(config.read_text(encoding="utf-8")))
                        template.bos_token, template.eos_token = bos, eos
                    return template
            raise TemplateError(f"no chat template found in directory {path}")
        text = path.read_text(encoding="utf-8")
        if path.suffix == ".json":
            config = json.loads(text)
            source = config.get("chat_template")
            if isinstance(source, list):  # named templates: prefer "default", then "tool_use"
                named = {t.get("name"): t.get("template") for t in source if isinstance(t, dict)}
                source = named.get("default") or named.get("tool_use") or next(iter(named.values()), None)
            if not isinstance(source, str):
                raise TemplateError(f"{path} has no chat_template")
            bos, eos = _special_tokens(config)
            return cls(source, bos, eos, name=str(path))
        return cls(text, name=str(path))


def _special_tokens(config: Mapping[str, Any]) -> tuple[str, str]:
    def token(value: Any) -> str:
        if isinstance(value, Mapping):
            return str(value.get("content", ""))
        return value if isinstance(value, str) else ""

    return token(config.get("bos_token")), token(config.get("eos_token"))
