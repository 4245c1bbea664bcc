"""A conversation rendered with a chat template: the history shaped the way this template takes it.

Templates disagree on what a conversation may hold. Some render a system message anywhere, some
only first, some not at all; Mistral's refuse call ids that are not nine letters and digits;
Hermes-style templates concatenate ``tool.description`` and fail when a client left it out. Each
template is probed once (``profile_of``: a few renders of tiny conversations), and every request is
shaped by that profile before its one render:

* system text (``developer`` included) stays in place where the template renders it anywhere; is
  merged into one leading system message where it renders only the first; is folded into the first
  user turn where it renders none (Gemma's documented practice). After the render every system
  text is checked to be in the prompt — a template that still drops it is a clear error, never a
  silent loss;
* call ids are mapped to nine letters and digits where the template demands it — the same id to the
  same short id, so a tool result still points at its call, and an id that already fits is kept;
* a tool result without ``name`` gets the name of the call it answers (templates that print it);
* tools without descriptions get empty ones where the template needs them, and an empty tool list
  rather than none where the template iterates over it unconditionally; variables a template expects
  from its own serving stack (``functions``, ``datetime``) are supplied;
* an assistant turn that only calls tools has ``content: ""`` (as vLLM renders it), or ``None`` where
  the template renders calls only then; a template that does not render calls at all gets them as
  the turn's text, written the way the model writes them (``call_text``), and one that does not
  render tool results gets them as user turns;
* a turn with images (``Turn.parts``) reaches the template in one of two shapes (``MediaStyle``):
  as transformers gives it — ``content`` a list of ``{"type": "text", "text": …}`` and ``{"type":
  "image"}`` parts, in the client's order, the template writing its own placeholder for each image
  (a template with no place for images is a clear error; one that has none in tool results gets a
  result's images in a user turn right after the results) — or as llama-server's own chat endpoint
  gives it: ``content`` one string, each image replaced by the backend's media marker, text parts
  joined by newlines except next to a marker (``marker_content``).

A render that continues the one before (``Resume``: an agent's next turn) makes messages only for
the turns after those it has again: the earlier render's messages, call names and result ids ride
on its state (``Derived``) and are taken as they are while what they were made of holds (the same
turn objects — or a few made again with the same fields — and nothing after them that moves system
text, renames a result or was read by an earlier message); else every message is made, each turn's
kept message given again where its fields are the same (``Turn.derived``).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date
from itertools import compress, count, islice
from operator import is_, is_not
from typing import Any, Literal

from jinja2 import meta

from app.conversation import Call, Turn
from app.media import Part, items
from app.templates.chat_template import ChatTemplate, JsonMemo, TemplateError
from app.templates.resume import Resume

SystemPlacement = Literal["anywhere", "leading", "fold"]

_ALNUM9 = re.compile(r"[A-Za-z0-9]{9}")
_BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


@dataclass(frozen=True, slots=True)
class TemplateProfile:
    """What one chat template can take (see the module docstring)."""

    system: SystemPlacement = "anywhere"
    alnum9_ids: bool = False  # call ids must be nine letters and digits (Mistral)
    tool_descriptions: bool = False  # missing tool / parameter descriptions must be filled with ""
    tools_list_required: bool = False  # the template iterates ``tools`` even when there are none
    call_content_none: bool = False  # calls render only when the assistant's content is None
    renders_calls: bool = True  # the assistant's tool_calls reach the prompt
    renders_results: bool = True  # tool messages reach the prompt
    #: variables the template reads that its serving stack supplied (see ``STACK_VARIABLES``)
    stack_variables: frozenset[str] = field(default_factory=frozenset)


CallText = Callable[[Sequence[Call]], str]


def json_call_text(calls: Sequence[Call]) -> str:
    """Calls as JSON lines ``{"name": …, "arguments": {…}}`` (when the model's own format is unknown)."""
    lines = []
    for call in calls:
        arguments = call.arguments
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except (ValueError, RecursionError):
                pass
        lines.append(json.dumps({"name": call.name, "arguments": arguments}, ensure_ascii=False))
    return "\n".join(lines)


def _functions_json(tools: Sequence[Mapping[str, Any]] | None) -> str:
    return json.dumps([t.get("function", t) for t in tools or ()], ensure_ascii=False, indent=4)


#: variables a few templates expect from the stack they were written for (FireFunction v2's
#: ``functions`` and ``datetime``), supplied when the template reads them and the request did not
STACK_VARIABLES: dict[str, Callable[[Sequence[Mapping[str, Any]] | None], str]] = {
    "functions": _functions_json,
    "datetime": lambda _tools: date.today().strftime("%Y-%m-%d"),
}


def short_call_id(call_id: str) -> str:
    """A nine-character alphanumeric id for ``call_id``: itself when it already is one, else a
    stable digest of it (the same id always maps to the same short id)."""
    if _ALNUM9.fullmatch(call_id):
        return call_id
    n = int.from_bytes(hashlib.sha256(call_id.encode()).digest()[:8], "big")
    out = []
    for _ in range(9):
        n, r = divmod(n, 62)
        out.append(_BASE62[r])
    return "".join(out)


# ------------------------------------------------------------------------------------ probing

_PROBE_TOOL = {"type": "function", "function": {
    "name": "probe_tool", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}}}


def _renders(template: ChatTemplate, messages: list[dict[str, Any]], tools: Any = None, *needles: str,
             stack: frozenset[str] = frozenset()) -> bool:
    extra: dict[str, Any] = {name: STACK_VARIABLES[name](tools) for name in stack}
    try:
        prompt = template.render(messages, tools, add_generation_prompt=True, **extra)
    except TemplateError:
        return False
    return all(n in prompt for n in needles)


def _probe_system(template: ChatTemplate, stack: frozenset[str]) -> SystemPlacement:
    first = [{"role": "system", "content": "PROBE-SYS-ONE"}, {"role": "user", "content": "PROBE-USER"}]
    if not _renders(template, first, None, "PROBE-SYS-ONE", "PROBE-USER", stack=stack):
        return "fold"
    later = [*first, {"role": "assistant", "content": "PROBE-ANSWER"}, {"role": "system", "content": "PROBE-SYS-TWO"},
             {"role": "user", "content": "PROBE-USER-TWO"}]
    return "anywhere" if _renders(template, later, None, "PROBE-SYS-ONE", "PROBE-SYS-TWO", stack=stack) else "leading"


def _call_conversation(call_id: str, content: str | None = "") -> list[dict[str, Any]]:
    return [{"role": "user", "content": "PROBE-USER"},
            {"role": "assistant", "content": content, "tool_calls": [
                {"id": call_id, "type": "function", "function": {"name": "probe_tool", "arguments": '{"q": "PROBE-ARG"}'}}]},
            {"role": "tool", "tool_call_id": call_id, "name": "probe_tool", "content": "PROBE-RESULT"}]


def _probe(template: ChatTemplate) -> TemplateProfile:
    try:
        declared = meta.find_undeclared_variables(template._template.environment.parse(template.source))
    except Exception:  # noqa: BLE001 - a template that compiled parses; be safe anyway
        declared = set()
    stack = frozenset(declared & STACK_VARIABLES.keys())
    user = [{"role": "user", "content": "PROBE-USER"}]
    bare_tool = {"type": "function", "function": {
        "name": "probe_tool", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}
    described = fill_descriptions([bare_tool])
    tool_descriptions = (not _renders(template, user, [bare_tool], stack=stack)
                         and _renders(template, user, described, stack=stack))
    tools = fill_descriptions([_PROBE_TOOL]) if tool_descriptions else [_PROBE_TOOL]
    tools_list = not _renders(template, user, None, stack=stack) and _renders(template, user, [], stack=stack)
    call_id = "call_probe_0001"
    if not _renders(template, _call_conversation(call_id), tools, stack=stack) \
            and _renders(template, _call_conversation("a1B2c3D4e"), tools, stack=stack):
        alnum9, call_id = True, "a1B2c3D4e"
    else:
        alnum9 = False
    content_none = (not _renders(template, _call_conversation(call_id), tools, "PROBE-ARG", stack=stack)
                    and _renders(template, _call_conversation(call_id, None), tools, "PROBE-ARG", stack=stack))
    conversation = _call_conversation(call_id, None if content_none else "")
    renders_calls = _renders(template, conversation, tools, "PROBE-ARG", stack=stack)
    renders_results = _renders(template, conversation, tools, "PROBE-RESULT", stack=stack)
    return TemplateProfile(_probe_system(template, stack), alnum9, tool_descriptions, tools_list, content_none,
                           renders_calls, renders_results, stack)


def profile_of(template: ChatTemplate) -> TemplateProfile:
    """The template's profile, probed on first use and kept on the template."""
    profile = getattr(template, "_profile", None)
    if profile is None:
        profile = _probe(template)
        template._profile = profile  # type: ignore[attr-defined]
    return profile


# ---------------------------------------------------------------------------------- shaping


def fill_descriptions(tools: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Tools with ``""`` for every missing function and top-level parameter description."""
    filled = []
    for tool in tools:
        function = dict(tool.get("function") or {})
        function.setdefault("description", "")
        params = function.get("parameters")
        if isinstance(params, Mapping) and isinstance(params.get("properties"), Mapping):
            props = {k: ({"description": "", **v} if isinstance(v, Mapping) else v)
                     for k, v in params["properties"].items()}
            function["parameters"] = {**params, "properties": props}
        filled.append({**tool, "function": function})
    return filled


def _arrange_system(turns: Sequence[Turn], placement: SystemPlacement) -> list[Turn]:
    if placement == "anywhere" or not any(t.role == "system" for t in turns):
        return list(turns)
    texts = [t.text for t in turns if t.role == "system"]
    rest = [t for t in turns if t.role != "system"]
    joined = "\n\n".join(texts)
    if placement == "leading":
        return [Turn("system", joined), *rest]
    for i, turn in enumerate(rest):  # fold: into the first user turn
        if turn.role == "user":
            parts = turn.parts
            if parts:  # the system text joins the first text piece, or comes first
                first = parts[0]
                parts = (f"{joined}\n\n{first}", *parts[1:]) if isinstance(first, str) else (joined, *parts)
            folded = Turn("user", f"{joined}\n\n{turn.text}" if turn.text else joined, name=turn.name,
                          extra=turn.extra, parts=parts)
            return [*rest[:i], folded, *rest[i + 1:]]
    return [Turn("user", joined), *rest]


def _calls_as_text(turns: Sequence[Turn], call_text: CallText) -> list[Turn]:
    out = []
    for turn in turns:
        if turn.role == "assistant" and turn.calls:
            text = "\n".join(t for t in (turn.text, call_text(turn.calls)) if t)
            turn = Turn("assistant", text, reasoning=turn.reasoning, name=turn.name, extra=turn.extra)
        out.append(turn)
    return out


def _results_as_user_turns(turns: Sequence[Turn]) -> list[Turn]:
    """Tool results as user turns; the results of one run of calls share one turn. The turns given
    are not changed (they may be shared: ``app.api.chat.known``)."""
    out: list[Turn] = []
    made: Turn | None = None  # the user turn holding the latest run of results
    for turn in turns:
        if turn.role != "tool":
            out.append(turn)
        elif made is not None and out[-1] is made:
            if made.parts or turn.parts:
                made.parts = (*(made.parts or (made.text,)), "\n\n", *(turn.parts or (turn.text,)))
            made.text += "\n\n" + turn.text
        else:
            made = Turn("user", turn.text, parts=turn.parts)
            out.append(made)
    return out


def _tool_images_as_user_turns(turns: Sequence[Turn]) -> list[Turn]:
    """For a template with no place for images in tool results: a result keeps its text, and the
    images of a run of results follow it in one user turn (the turns given are not changed)."""
    out: list[Turn] = []
    held: list[Part] = []
    for turn in turns:
        if turn.role != "tool" and held:
            out.append(Turn("user", "", parts=tuple(held)))
            held = []
        if turn.role == "tool" and turn.parts:
            held += items(turn.parts)
            turn = Turn("tool", turn.text, tool_call_id=turn.tool_call_id, name=turn.name, extra=turn.extra)
        out.append(turn)
    if held:
        out.append(Turn("user", "", parts=tuple(held)))
    return out


#: a turn's images as the template gets them: ``None`` — as transformers gives them (``{"type": "image"}``
#: parts); a string — the backend's media marker, in one string of content (llama-server's chat endpoint)
MediaStyle = str | None


def marker_content(parts: Sequence[Part], marker: str) -> str:
    """A turn's content as llama-server's chat endpoint makes it for the template: each media item
    its ``marker``, the text parts joined by a newline — but none right after or before a marker."""
    text = ""
    after_marker = False
    for part in parts:
        if isinstance(part, str):
            if not after_marker and text:
                text += "\n"
            text += part
            after_marker = False
        else:
            text += marker
            after_marker = True
    return text


def typed_content(parts: Sequence[Part]) -> list[dict[str, Any]]:
    """A turn's content as transformers gives it to a template: text and image parts, in order."""
    return [{"type": "text", "text": part} if isinstance(part, str) else {"type": "image"} for part in parts]


def _image_roles(template: ChatTemplate) -> frozenset[str]:
    """The roles (``user``, ``tool``) in whose messages the template writes an image part (probed
    once, on the first request with images, and kept on the template)."""
    roles = getattr(template, "_image_roles", None)
    if roles is not None:
        return roles  # type: ignore[no-any-return]
    found = set()
    for role in ("user", "tool"):
        with_image = [{"type": "text", "text": "PROBE-A"}, {"type": "image"}, {"type": "text", "text": "PROBE-B"}]
        without = [with_image[0], with_image[2]]
        prompts = []
        for content in (with_image, without):
            messages: list[dict[str, Any]] = [{"role": "user", "content": content if role == "user" else "PROBE-U"}]
            if role == "tool":
                messages = [*messages, {"role": "assistant", "content": "", "tool_calls": [
                    {"id": "a1B2c3D4e", "type": "function", "function": {"name": "probe_tool", "arguments": "{}"}}]},
                    {"role": "tool", "tool_call_id": "a1B2c3D4e", "name": "probe_tool", "content": content}]
            try:
                prompts.append(template.render(messages, None, add_generation_prompt=True))
            except TemplateError:
                prompts.append("")
        image, plain = prompts
        if image and "PROBE-A" in image and "PROBE-B" in image and image != plain and "'type'" not in image:
            found.add(role)
    roles = frozenset(found)
    template._image_roles = roles  # type: ignore[attr-defined]
    return roles


def template_messages(turns: Sequence[Turn], profile: TemplateProfile, placement: SystemPlacement | None = None,
                      call_text: CallText = json_call_text, media: MediaStyle = None,
                      tool_images: bool = True) -> list[dict[str, Any]]:
    """The conversation as chat-template messages (OpenAI's shape, which templates are written for).
    A turn that reaches the template as given is converted once: its message is kept on it
    (``Turn.derived``, with the fields and the settings it was made from) and given again, the same
    object, while those are the same — so an agent's next turn hands the render cache the very
    messages it saw last time. The messages are never changed afterwards (nothing here does;
    ``ChatTemplate.render`` renders copies). ``media``: how images reach the template (``MediaStyle``);
    ``tool_images``: whether it writes them in tool results (else they follow in a user turn)."""
    return _derive(turns, profile, placement or profile.system, call_text, media, tool_images, None).messages


@dataclass(eq=False, slots=True)
class Derived:
    """The messages one render was given (``template_messages``) and what making them read of its
    turns, kept with the render's state (``RenderState.derived``) so that the next render of the
    conversation makes messages only for the turns after those it has again (``_continued``):
    the settings (``key``), the turns as given, the call names by id (the last call with an id
    names it), the ids tool results answer, how many turns fewer the messages are (system turns
    joined or folded: all of them among the first), the place below which the turns must stay for
    that to hold (the turn the system text was folded into), whether a turn holds content parts,
    and the system texts the prompt must show."""

    key: tuple[Any, ...]
    turns: tuple[Turn, ...]
    messages: list[dict[str, Any]]
    names: dict[str, str]
    results: frozenset[str]
    shift: int = 0
    anchor: int = 0
    parts: bool = False
    system: list[str] = field(default_factory=list)

    @property
    def size(self) -> int:
        """What it holds beyond the turns and messages the render state holds anyway, in bytes (about)."""
        return 16 * len(self.turns) + 120 * (len(self.names) + len(self.results)) + 200


#: turns equal to the earlier render's but not the same objects that a continued derivation looks
#: past (a request's instructions, made again each turn from the same text); past these, it stops
EQUAL_TURNS = 4


def _continued(turns: Sequence[Turn], previous: Derived) -> int | None:
    """How many first turns ``previous``'s messages serve as they are: those it was made of that
    this render has again — the same objects at the same places, or a few (``EQUAL_TURNS``) made
    again with the same fields — when the turns after them, now and then, are not system turns
    (the system text is placed as it was), those then held no call, tool result or content part
    (what the earlier turns read of the others is as it was), none now calls with the id of an
    earlier tool result (it would name it), and the turn the system text was folded into is among
    them; ``None``: no such turns (make every message)."""
    before = previous.turns
    n = min(len(before), len(turns))
    k = -1
    for _ in range(EQUAL_TURNS + 1):  # past a turn made again as it was (a request's instructions)
        k = next(compress(count(k + 1), map(is_not, islice(before, k + 1, None), islice(turns, k + 1, None))), n)
        if k == n or before[k] != turns[k]:
            break
    if k < previous.anchor:
        return None
    gone, new = before[k:], turns[k:]
    if any(t.role in ("system", "tool") or t.calls or t.parts for t in gone):
        return None
    if any(t.role == "system" for t in new):
        return None
    results = previous.results
    if results and any(call.id in results for t in new for call in t.calls):
        return None
    return k


def _derive(turns: Sequence[Turn], profile: TemplateProfile, placement: SystemPlacement, call_text: CallText,
            media: MediaStyle, tool_images: bool, previous: Derived | None, k: int | None = None) -> Derived:
    """The messages for ``turns`` (``template_messages``), and what they were made of; ``previous``
    and ``k`` (``_continued``): the messages of the first ``k`` turns are ``previous``'s, when it
    was made with the same settings and every turn maps to one message (system turns aside)."""
    key = (profile, placement, call_text, media, tool_images)
    one_to_one = profile.renders_results and (tool_images or media is not None)
    if previous is not None and k is not None and previous.key == key and one_to_one:
        new = turns[k:]
        names = {**previous.names, **{call.id: call.name for turn in new for call in turn.calls}}
        tail: list[str] = []
        messages = [*previous.messages[:k - previous.shift],
                    *_messages(new if profile.renders_calls else _calls_as_text(new, call_text), names, profile,
                               media, tail)]
        return Derived(key, tuple(turns), messages, names, previous.results.union(tail), previous.shift,
                       previous.anchor)
    names = {call.id: call.name for turn in turns for call in turn.calls}
    arranged = _arrange_system(turns, placement)
    shift = len(turns) - len(arranged)
    anchor = 0
    if placement == "fold" and shift:  # the turn the system text went into (none: a user turn made for it)
        anchor = next((i + 1 for i, t in enumerate(turns) if t.role == "user"), len(turns) + 1)
    if not profile.renders_calls:
        arranged = _calls_as_text(arranged, call_text)
    if not profile.renders_results:
        arranged = _results_as_user_turns(arranged)
    elif media is None and not tool_images and any(t.role == "tool" and t.parts for t in arranged):
        arranged = _tool_images_as_user_turns(arranged)
    results: list[str] = []
    messages = _messages(arranged, names, profile, media, results)
    return Derived(key, tuple(turns), messages, names, frozenset(results), shift, anchor)


def _messages(turns: Sequence[Turn], names: Mapping[str, str], profile: TemplateProfile, media: MediaStyle,
              results: list[str]) -> list[dict[str, Any]]:
    """Each turn's message, made once per turn while its fields and settings are the same (kept on
    it: ``Turn.derived``); the ids the tool results answer are added to ``results``."""
    ids = short_call_id if profile.alnum9_ids else (lambda call_id: call_id)
    flags = (profile.alnum9_ids, profile.call_content_none, media)
    messages: list[dict[str, Any]] = []
    for turn in turns:
        inputs = (turn.role, turn.text, turn.calls, turn.reasoning, turn.tool_call_id, turn.name, turn.extra,
                  turn.parts)
        named = None
        if turn.role == "tool" and turn.tool_call_id is not None:
            named = names.get(turn.tool_call_id)
            results.append(turn.tool_call_id)
        derived = turn.derived
        if derived is not None and derived[0] == (flags, named) and all(map(is_, derived[1], inputs)):
            messages.append(derived[2])
            continue
        message = _template_message(turn, named, ids, profile, media)
        turn.derived = ((flags, named), inputs, message)
        messages.append(message)
    return messages


def _template_message(turn: Turn, named: str | None, ids: Callable[[str], str],
                      profile: TemplateProfile, media: MediaStyle = None) -> dict[str, Any]:
    """One turn as a chat-template message (``named``: a tool result's name, found from its call)."""
    content: Any = turn.text
    if turn.parts:
        content = typed_content(turn.parts) if media is None else marker_content(turn.parts, media)
    message: dict[str, Any] = {**turn.extra, "role": turn.role, "content": content}
    if turn.name is not None:
        message["name"] = turn.name
    if turn.role == "assistant":
        if turn.calls:
            message["tool_calls"] = [
                {"id": ids(call.id), "type": "function", "function": {"name": call.name, "arguments": call.arguments}}
                for call in turn.calls]
            if not turn.text and profile.call_content_none:
                message["content"] = None
        if turn.reasoning is not None:
            message["reasoning_content"] = turn.reasoning
    elif turn.role == "tool" and turn.tool_call_id is not None:
        message["tool_call_id"] = ids(turn.tool_call_id)
        if turn.name is None and named is not None:
            message["name"] = named
    return message


def _read_before(turns: Sequence[Turn], resume: Resume | None) -> tuple[Derived | None, int | None, bool, list[str]]:
    """The derivation the render before left (``resume``) and how many first turns it serves
    (``_continued``; both ``None``: none), whether a turn holds content parts and the system texts
    — read off the turns after those where it serves (they hold no system text), else off all."""
    previous = resume.previous.derived if resume is not None and resume.previous is not None else None
    k = _continued(turns, previous) if isinstance(previous, Derived) else None
    if previous is None or k is None:
        return None, None, any(t.parts for t in turns), [t.text.strip() for t in turns
                                                          if t.role == "system" and t.text.strip()]
    return previous, k, previous.parts or any(t.parts for t in turns[k:]), previous.system


def render_conversation(template: ChatTemplate, turns: Sequence[Turn], tools: Sequence[Mapping[str, Any]] | None,
                        call_text: CallText = json_call_text, kwargs: Mapping[str, Any] | None = None,
                        resume: Resume | None = None, memo: JsonMemo | None = None, media: MediaStyle = None) -> str:
    """The prompt for ``turns`` (generation prompt added; images as ``media`` says) with the template
    variables ``kwargs``. Raises ``TemplateError`` with the template's own message, when system text
    could not be placed anywhere in the prompt, or when the template has no place for the turns'
    images. ``resume`` and ``memo``: see ``ChatTemplate.render``."""
    profile = profile_of(template)
    previous, k, parts, system = _read_before(turns, resume)
    tool_images = True
    if media is None and parts:
        roles = _image_roles(template)
        if "user" not in roles:
            raise TemplateError("this chat template has no place for images (it writes no image part of a message's "
                                "content); serve a vision model's template (--chat-template)")
        tool_images = "tool" in roles
    if tools and profile.tool_descriptions:
        tools = fill_descriptions(tools)
    if not tools and profile.tools_list_required:
        tools = []
    elif not tools:
        tools = None
    variables = dict(kwargs or {})
    for name in profile.stack_variables:
        variables.setdefault(name, STACK_VARIABLES[name](tools))
    placements: list[SystemPlacement] = [profile.system]
    if system and profile.system != "fold":
        placements.append("fold")
    failure: TemplateError | None = None
    for placement in placements:
        derived = _derive(turns, profile, placement, call_text, media, tool_images, previous, k)
        try:
            prompt = template.render(derived.messages, tools, add_generation_prompt=True, frozen=True, resume=resume,
                                     memo=memo, kwargs=variables)
        except TemplateError as exc:
            failure = failure or exc
            continue
        if all(text in prompt for text in system):
            if resume is not None and resume.state is not None:  # for the next render to continue
                derived.parts, derived.system = parts, system
                resume.state.derived = derived
                resume.state.size += derived.size
            return prompt
        failure = None  # it rendered, but without the system text: say that
        if resume is not None:  # a state made from a placement not taken is not this prompt's
            resume.state, resume.reused = None, 0
    if failure is not None:
        if not tool_images and any(t.role == "tool" and t.parts for t in turns):
            raise TemplateError(f"this chat template has no place for images in tool results, and refused them in a "
                                f"user turn after the results ({failure}); send such images in a user message")
        raise failure
    raise TemplateError("this chat template leaves the system/developer message out of the prompt, even folded "
                        "into the first user message; send it as part of a user message instead")
