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
import marshal
import pickle
import types
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension
from jinja2.runtime import LoopContext
from jinja2.sandbox import SandboxedEnvironment, modifies_known_mutable
from jinja2.utils import Namespace

from app.templates.fastrender import render
from app.templates.resume import LoopPlan, NotProven, RenderTooLarge, Resume, plan_of, render_bound, render_resumable


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


class JsonMemo(Protocol):
    """Where ``tojson`` keeps answers it gave before (``app.prefix``: an agent sends the same tools
    every turn, and encoding their schemas was half of what a template did before its main loop):
    ``get`` an answer by its key, ``put`` one."""

    def get(self, key: bytes) -> str | None: ...

    def put(self, key: bytes, answer: str) -> None: ...


#: the memo of the render under way (``ChatTemplate.render``'s ``memo``), if any
_memo: ContextVar[JsonMemo | None] = ContextVar("tojson_memo", default=None)
#: values whose key (their exact bytes) is shorter or longer than these are encoded every time
MEMO_MIN_BYTES, MEMO_MAX_BYTES = 256, 256 << 10


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None,
            separators: tuple[str, str] | None = None, sort_keys: bool = False) -> str:
    """The ``tojson`` filter; with a memo, a value met before is known by its exact bytes
    (``marshal``: equal bytes are an equal value of the same types, so the same JSON) with the
    options. Values ``marshal`` refuses (tool-call arguments, undefined values, iterables) and
    small or very large ones are encoded every time. Its current format (4) writes an object met
    twice as a reference, which depends on how the value's parts are shared: two equal values may
    then differ in bytes (a miss, never a wrong answer) — an agent's tools are the same objects
    every turn (``app.prefix``), and the format is ~1.5× quicker than the reference-free 2."""
    memo = _memo.get()
    if memo is None:
        return _encoded(value, ensure_ascii, indent, separators, sort_keys)
    try:
        key: bytes | None = marshal.dumps((value, ensure_ascii, indent, separators, sort_keys), 4)
    except ValueError:
        key = None
    if key is None or not MEMO_MIN_BYTES <= len(key) <= MEMO_MAX_BYTES:
        return _encoded(value, ensure_ascii, indent, separators, sort_keys)
    answer = memo.get(key)
    if answer is None:
        answer = _encoded(value, ensure_ascii, indent, separators, sort_keys)
        memo.put(key, answer)
    return answer


def _encoded(value: Any, ensure_ascii: bool, indent: int | None, separators: tuple[str, str] | None,
             sort_keys: bool) -> str:
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys,
                      default=_json_default)


def _now() -> datetime:
    """The clock templates see through ``strftime_now`` (tests pin it)."""
    return datetime.now()


def _strftime_now(fmt: str) -> str:
    return _now().strftime(fmt)


class _CallerOwned:
    """The lists, dicts and sets the caller handed one render (the context's values, all the way
    down), found only when a template first reaches for a method that would change one: most
    renders never do, and walking a long conversation costs more than the render's other work."""

    __slots__ = ("_ids", "_roots")

    def __init__(self, context: Mapping[str, Any]) -> None:
        self._roots: list[Any] = [context]
        self._ids: frozenset[int] | None = None

    def add(self, value: Any) -> None:
        """``value`` is the caller's too (the prepared messages, handed in beside the context)."""
        self._roots.append(value)
        self._ids = None

    def __contains__(self, obj_id: object) -> bool:
        if self._ids is None:
            self._ids = frozenset(_container_ids(self._roots))
        return obj_id in self._ids


#: what the caller handed the render being run (see ``_Sandbox``)
_caller_owned: ContextVar[_CallerOwned | None] = ContextVar("caller_owned", default=None)


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


#: every method name that changes a builtin mutable (``modifies_known_mutable`` is false for any other),
#: asked of jinja's public ``modifies_known_mutable`` for one of each kind it knows
_KNOWN_MUTABLES: tuple[object, ...] = ([], {}, set(), deque())
_MUTATORS = frozenset(name for obj in _KNOWN_MUTABLES for name in dir(obj) if modifies_known_mutable(obj, name))
#: attributes of a plain ``dict`` (any other ``dict.attr`` in a template is an item lookup)
_DICT_ATTRS = frozenset(dir(dict))
#: public ``str`` methods the sandbox lets through unchanged (``format`` and ``format_map`` it wraps)
_STR_METHODS = frozenset(name for name in dir(str) if not name.startswith("_")) - {"format", "format_map"}


class _Sandbox(SandboxedEnvironment):
    """Jinja's sandbox, where a template may change the lists and dicts it made itself (Kimi K2's
    templates build lists with ``.append``) but never one the caller handed it: messages, tools and
    keyword arguments stay as given, as in jinja's immutable sandbox.

    ``getattr`` answers the lookups templates make most — a key of a plain ``dict``
    (``message.content``), a method of a plain ``str`` (``content.startswith``), ``loop.last``,
    ``ns.flag`` — without the general path's failed attribute lookup and safety checks, with the
    answers the general path gives: a plain dict has no attributes beyond ``dir(dict)``; public
    ``str`` methods other than ``format`` / ``format_map`` are safe and change nothing; a loop's or
    a namespace's public attributes are safe (neither is a known mutable)."""

    def getattr(self, obj: Any, attribute: str) -> Any:
        kind = type(obj)
        if kind is dict and attribute not in _DICT_ATTRS:
            value = obj.get(attribute, _MISSING)
            return self.undefined(obj=obj, name=attribute) if value is _MISSING else value
        if kind is str and attribute in _STR_METHODS:
            return getattr(obj, attribute)
        if kind is Namespace and not attribute.startswith("_"):  # its attributes, without its __getattribute__
            value = object.__getattribute__(obj, "_Namespace__attrs").get(attribute, _MISSING)
            if value is not _MISSING and not isinstance(value, _METHODS):
                return value
        if (kind is LoopContext or kind is Namespace) and not attribute.startswith("_"):
            try:  # ``loop.last``, ``ns.flag``: safe (neither is a known mutable; no "__" name)
                value = getattr(obj, attribute)
            except AttributeError:
                return super().getattr(obj, attribute)
            if isinstance(value, _METHODS):  # only a bound str.format needs wrapping
                wrapped = self.wrap_str_format(value)
                return value if wrapped is None else wrapped
            return value
        return super().getattr(obj, attribute)

    def is_safe_attribute(self, obj: Any, attr: str, value: Any) -> bool:
        if not super().is_safe_attribute(obj, attr, value):
            return False
        return attr not in _MUTATORS or not (modifies_known_mutable(obj, attr) and id(obj) in (_caller_owned.get() or ()))


_MISSING = object()
_METHODS = (types.MethodType, types.BuiltinMethodType)


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
    """One compiled chat template plus the special tokens it is rendered with.

    A render may continue an earlier render of the same conversation (``resume``: a template
    proven to allow it re-runs its loop only over what is new, ``app.templates.resume``) and keep
    ``tojson``'s answers in a ``memo``; the prompt is the same either way."""

    def __init__(self, source: str, bos_token: str = "", eos_token: str = "", name: str = "template") -> None:
        self.source = source
        self.bos_token = bos_token
        self.eos_token = eos_token
        self.name = name
        try:
            self._template = _environment().from_string(source)
        except jinja2.TemplateSyntaxError as exc:
            raise TemplateError(f"chat template {name} does not compile: {exc}") from exc
        self._loop_plan: LoopPlan | None = None
        self.resumable_why: str | None = None  # why the template is not resumable (None: not yet asked, or it is)

    def __getstate__(self) -> dict[str, Any]:
        """Pickled (to a prepare worker) as its source, compiled again there, with what was learned
        about it since (its profile) where that pickles; its resumable form is proven again there."""
        state = {key: value for key, value in self.__dict__.items() if key not in ("_template", "_loop_plan")}
        for key, value in list(state.items()):
            try:
                pickle.dumps(value)
            except Exception:  # noqa: BLE001 — what does not pickle is learned again
                del state[key]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["source"], state["bos_token"], state["eos_token"], state["name"])  # type: ignore[misc]
        self.__dict__.update({k: v for k, v in state.items() if k != "resumable_why"})

    def loop_plan(self) -> LoopPlan | None:
        """The template's resumable form (``app.templates.resume``), proven on first use; ``None``
        when it cannot be (``resumable_why`` says why)."""
        if self._loop_plan is None and self.resumable_why is None:
            try:
                self._loop_plan = plan_of(self._template.environment, self.source)
            except NotProven as exc:
                self.resumable_why = str(exc)
        return self._loop_plan

    def render(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None = None,
               add_generation_prompt: bool = True, *, frozen: bool = False, resume: Resume | None = None,
               memo: JsonMemo | None = None, kwargs: Mapping[str, Any] | None = None, **more: Any) -> str:
        """Render a conversation; raises ``TemplateError`` with the template's own message.
        ``kwargs`` (and ``more``) reach the template as variables. ``resume``: continue an earlier
        render of this conversation, where the template allows it, and leave this one's state
        there (``app.templates.resume``). ``frozen``: ``messages``' items (and all they hold) are
        never changed from here on — a later render may then know them again by identity.
        ``memo``: where ``tojson`` keeps its answers."""
        context = {
            "bos_token": self.bos_token,
            "eos_token": self.eos_token,
            **{k: v for k, v in (kwargs or {}).items() if v is not None},
            **{k: v for k, v in more.items() if v is not None},
            "tools": list(tools) if tools is not None else None,
            "add_generation_prompt": add_generation_prompt,
        }
        owned = _CallerOwned(context)
        token = _caller_owned.set(owned)
        memo_token = _memo.set(memo)
        try:
            plan = self.loop_plan() if resume is not None else None
            if plan is not None and resume is not None:
                prompt = render_resumable(plan, resume, messages, prepare_messages, context, owned.add, frozen)
                if prompt is not None:
                    return prompt
                resume.state, resume.reused = None, 0
            if resume is not None and render_bound() is not None:  # a bounded continued render never renders whole
                raise RenderTooLarge("the render could not continue the one before")
            context["messages"] = prepare_messages(messages)
            owned.add(context["messages"])
            return render(self._template, context)
        except TemplateError:
            raise
        except jinja2.TemplateError as exc:
            raise TemplateError(f"chat template failed: {exc}") from exc
        except (TypeError, ValueError, KeyError, AttributeError, IndexError) as exc:
            raise TemplateError(f"chat template failed: {type(exc).__name__}: {exc}") from exc
        finally:
            _memo.reset(memo_token)
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
