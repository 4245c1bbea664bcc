"""Differential analysis of a chat template: what reasoning and tool calls look like in its renders.

The template is rendered with controlled variations (``app.templates.autodetect.render``) and the renders
are diffed:

* **reasoning** — a message with reasoning against one without: the text before the reasoning
  sentinel is the start marker, the first piece of markup after it the end marker, what follows
  up to the content a content wrapper. A reasoning block opened by the generation prompt
  (``<think>`` at the end of the prompt) shows as reasoning that starts the output; its start is
  the prompt's tail. Templates that drop reasoning from the last turn are read from the
  generation prompt with thinking on and off (``<think>\\n`` vs ``<think>\\n</think>``), or from
  the empty block they render (``<think></think>``).
* **tool calls** — the assistant's output with calls against the same turn with content: the
  difference is the *call block*. Sentinel values are found in it: a JSON object equal to the
  arguments (JSON arguments), a JSON object holding the name and the arguments (a JSON call), or
  the argument keys and values one by one (tagged arguments, learned from a call with two
  arguments: key start = what precedes both keys, value end = what follows both values …). The
  block is rewritten with placeholders (name, id, arguments …), and one call is compared with two
  calls: the text between the two calls splits into the first call's closing markup, a separator
  and the second call's opening markup; what surrounds both calls is a section.

The result (``TemplateAnalysis``) describes the format and holds the renders (``Turn``) so that
candidate parsers can be checked against them (``app.templates.autodetect.select``).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from string import Template
from typing import Any

from app.templates.autodetect.diff import (
    balanced,
    is_markup,
    piece_spans,
    pieces,
    prefix_len,
    split_between,
    suffix_len,
)
from app.templates.autodetect.render import (
    CALL_VARIANTS,
    CONTENT,
    CONTENT_ONLY,
    CONTENT_OTHER,
    ONE_CALL,
    OTHER_NAME,
    REASONING,
    TWO_ARGS,
    TWO_CALLS,
    USER,
    WITH_REASONING,
    Call,
    Renderer,
    Turn,
)
from app.templates.chat_template import ChatTemplate
from parsers.shapes.generic import ARGS, CALL, CALL_ID, KEY, NAME, PARAMS, SKIP, GenericFormat, Params, Slot
from parsers.shapes.jsoncall import JsonCallShape
from parsers.wire import JSON_ARGS, ArgsEncoding, WireFormat, XmlParams

# placeholders for the slots of a call, in a call block rewritten as a pattern
P_NAME, P_ARGS, P_CALL, P_ID, P_SKIP_NAME, P_PARAMS, P_INDEX, P_KEY, P_VALUE = (chr(0xE000 + i) for i in range(9))
_SLOT_OF = {P_NAME: NAME, P_ARGS: ARGS, P_CALL: CALL, P_ID: CALL_ID, P_SKIP_NAME: SKIP, P_PARAMS: PARAMS,
            P_INDEX: SKIP}
_WIRE_OF = {P_NAME: "$name", P_ARGS: "$args", P_CALL: "$args", P_ID: "$index", P_SKIP_NAME: "$name",
            P_PARAMS: "$args", P_INDEX: "$index"}


# ---------------------------------------------------------------------------------------- results


@dataclass
class ReasoningFormat:
    start: str | None = None
    end: str | None = None
    content_markup: tuple[str, ...] = ()
    #: per render mode ("default", "on", "off"): whether the generation prompt leaves the output
    #: inside reasoning
    forced_open: dict[str, bool] = field(default_factory=dict)
    #: how the markers were found: "render", "generation prompt", "empty block"
    evidence: str = ""
    #: renders with reasoning (mode → turn), for checking parsers
    samples: dict[str, Turn] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"start": self.start, "end": self.end, "content_markup": list(self.content_markup),
                "forced_open": self.forced_open, "evidence": self.evidence}


@dataclass
class ToolFormat:
    """How the template writes calls (the learned pattern) and what was noticed on the way."""

    encoding: str = ""  # "json-call" | "tag+json" | "tag+params"
    section: tuple[str, str] = ("", "")
    call_open: str = ""
    call_close: str = ""
    separator: str = ""
    pattern: str = ""  # the call between its first and last slot, with placeholders
    json_list: bool = False
    shape: JsonCallShape | None = None
    params: Params | None = None
    call_id: str = "none"  # where the call id goes: "none" | "json" | "before name" | "after name" | "after args"
    single_call_only: bool = False
    notes: list[str] = field(default_factory=list)
    generic: GenericFormat | None = None
    wire: WireFormat | None = None

    def readable_pattern(self) -> str:
        names = {P_NAME: "{name}", P_ARGS: "{args}", P_CALL: "{call}", P_ID: "{id}", P_SKIP_NAME: "{name}",
                 P_PARAMS: "{params}", P_INDEX: "{index}"}
        return "".join(names.get(c, c) for c in self.call_open + self.pattern + self.call_close)

    def name_affixes(self) -> tuple[str, str]:
        """The literal text right before and right after the function name."""
        if self.shape is not None:
            return ("{\"", "\": {") if self.shape.name_is_key else (f'"{self.shape.name_keys[0]}": "', '"')
        text = self.call_open + self.pattern + self.call_close
        at = text.find(P_NAME)
        if at < 0:
            return "", ""
        before = text[:at]
        after = text[at + 1:]
        start = max((before.rfind(p) for p in _SLOT_OF), default=-1) + 1
        ends = [i for i in (after.find(p) for p in _SLOT_OF) if i >= 0]
        return before[start:], after[:min(ends)] if ends else after

    def as_dict(self) -> dict[str, Any]:
        prefix, suffix = self.name_affixes()
        out: dict[str, Any] = {
            "encoding": self.encoding, "section": list(self.section), "call": self.readable_pattern(),
            "name_prefix": prefix, "name_suffix": suffix,
            "call_open": self.call_open, "call_close": self.call_close, "separator": self.separator,
            "json_list": self.json_list, "call_id": self.call_id, "single_call_only": self.single_call_only,
            "notes": self.notes,
        }
        if self.shape is not None:
            out["json"] = {"name_keys": list(self.shape.name_keys[:1]), "args_keys": list(self.shape.args_keys[:1]),
                           "nest_keys": list(self.shape.nest_keys[:1]) if self.shape.nest_keys != ("function",) else [],
                           "id_keys": list(self.shape.id_keys), "name_is_key": self.shape.name_is_key}
        if self.params is not None:
            p = self.params
            out["params"] = {"key_start": p.key_start, "key_end": p.key_end, "value_start": p.value_start,
                             "value_end": p.value_end, "attributes_end": p.attributes_end,
                             "trim_newline": p.trim_newline}
        return out


@dataclass
class TemplateAnalysis:
    source: str
    renderer: Renderer
    tools_in_prompt: bool = False
    calls_rendered: bool = False
    turns: dict[str, Turn] = field(default_factory=dict)  # call variants (default mode) by label
    content_turn: Turn | None = None
    reasoning: ReasoningFormat | None = None
    tools: ToolFormat | None = None
    blocks: dict[str, str] = field(default_factory=dict)

    @property
    def errors(self) -> dict[str, str]:
        return self.renderer.errors


# ---------------------------------------------------------------------------------------- entry


def analyse(template: ChatTemplate) -> TemplateAnalysis:
    """Render ``template``'s variations and read off its reasoning and tool-call formats."""
    renderer = Renderer(template)
    result = TemplateAnalysis(template.source, renderer)
    plain = _safe(lambda: template.render([{"role": "user", "content": USER}], None, add_generation_prompt=True))
    with_tools = renderer.prompt() if renderer.tools_render else None
    result.tools_in_prompt = bool(with_tools and "get_weather" in with_tools and with_tools != plain)
    result.content_turn = renderer.turn(CONTENT_ONLY, CONTENT_OTHER)
    for variant in CALL_VARIANTS:
        turn = renderer.turn(variant, CONTENT_ONLY)
        if turn is not None and all(c.name in turn.output for c in variant.calls):
            result.turns[variant.label] = turn
    result.calls_rendered = ONE_CALL.label in result.turns
    result.reasoning = _safe(lambda: analyse_reasoning(renderer, result))
    if result.calls_rendered:
        result.tools = _safe(lambda: analyse_tools(result))
    return result


def _safe(fn: Any) -> Any:
    """Analysis steps never raise: an unexpected shape is simply not learned."""
    try:
        return fn()
    except Exception:  # noqa: BLE001 - a template's oddity must never crash start-up
        return None


# ---------------------------------------------------------------------------------------- reasoning


def analyse_reasoning(r: Renderer, result: TemplateAnalysis) -> ReasoningFormat | None:
    fmt = ReasoningFormat()
    prompts = {mode: r.prompt(mode) for mode in ("default", "on", "off")}
    for mode in ("on", "default"):
        turn = r.turn(WITH_REASONING, CONTENT_OTHER, mode)
        if turn is None or REASONING not in turn.output:
            continue
        fmt.samples[mode] = turn
        if fmt.end is not None:
            continue
        out = turn.output
        at = out.index(REASONING)
        before, after = out[:at], out[at + len(REASONING):]
        mid = after[:after.find(CONTENT)] if CONTENT in after else after
        mid_pieces = pieces(mid)
        if not mid_pieces:
            continue
        fmt.end = mid_pieces[0]
        rest = mid.strip()[len(fmt.end):].strip()
        if rest:
            fmt.content_markup += tuple(p for p in rest.split() if is_markup(p))
            if len(rest.split()) > 1:
                fmt.content_markup += (rest,)
        fmt.start = before.strip() or _opener_in_prompt(r, mode) or _opening_form_in_prompt(r, mode, fmt.end) or None
        fmt.evidence = "render"
    # a render whose prompt closes the block shows reasoning the model would never write there
    fmt.samples = {m: t for m, t in fmt.samples.items() if not (fmt.end and t.prompt.rstrip().endswith(fmt.end))}
    if fmt.end is None:
        _reasoning_from_prompts(r, prompts, result, fmt)
    if fmt.end is None:
        return None
    if fmt.start and not _closing_form(fmt.start) and fmt.end == fmt.start:
        fmt.start = None
    fmt.content_markup += _content_wrappers(r, result, fmt)
    fmt.content_markup = tuple(dict.fromkeys(m for m in fmt.content_markup if m and m not in (fmt.start, fmt.end)))
    for mode, prompt in prompts.items():
        if prompt is not None:
            fmt.forced_open[mode] = _ends_open(prompt, fmt)
    return fmt


def _opener_in_prompt(r: Renderer, mode: str) -> str:
    """The prompt's own tail that a render without reasoning does not share (``<think>``,
    ``Here are my reasoning steps:``)."""
    prompt = r.prompt(mode)
    plain = r.full(CONTENT_ONLY, mode)
    if prompt is None or plain is None:
        return ""
    return prompt[prefix_len(prompt, plain):].strip()


def _opening_form_in_prompt(r: Renderer, mode: str, end: str) -> str:
    """The start marker of a block the prompt opened, spelled like ``end`` (``</think>`` →
    ``<think>``, ``<|close|>think<|sep|>`` → ``<|open|>think<|sep|>``), if the prompt ends with it."""
    prompt = r.prompt(mode)
    if not prompt:
        return ""
    tail = prompt.rstrip()
    for old, new in (("</", "<"), ("[/", "["), ("END", "START"), ("close", "open"), ("end", "begin"),
                     ("End", "Begin")):
        candidate = end.replace(old, new, 1)
        if candidate != end and tail.endswith(candidate):
            return candidate
    return ""


def _reasoning_from_prompts(r: Renderer, prompts: Mapping[str, str | None], result: TemplateAnalysis,
                            fmt: ReasoningFormat) -> None:
    """Reasoning markers without a rendered reasoning text: from the generation prompt with
    thinking on and off, or from an empty block in the rendered turn."""
    on, off = prompts.get("on"), prompts.get("off")
    if on is not None and off is not None and USER in on and USER in off:
        on, off = on[on.rindex(USER):], off[off.rindex(USER):]  # the system prompt may differ too
    if on is not None and off is not None and on != off:
        n = prefix_len(on, off)
        x, y = on[n:].strip(), off[n:].strip()
        ys = pieces(y)
        if x and y.startswith(x) and len(y) > len(x):  # "<think>\n" vs "<think>\n</think>"
            fmt.start, fmt.end = x, y[len(x):].strip()
        elif not x and len(ys) >= 2 and _closing_form(ys[0]) == ys[-1]:  # "" vs "<think>\n\n</think>"
            fmt.start, fmt.end = ys[0], ys[-1]
        elif not x and len(ys) >= 2 and all(is_markup(p) for p in ys) and ys[0] != ys[-1]:
            fmt.start, fmt.end = ys[0], ys[-1]  # "" vs "<|channel>thought\n<channel|>": an empty block
        elif x and len(ys) == 1 and _closing_form(x) == ys[0]:  # "<think>" vs "</think>"
            fmt.start, fmt.end = x, ys[0]
        if fmt.end:
            fmt.evidence = "generation prompt (thinking on/off)"
            return
    turn = result.content_turn
    if turn is not None and CONTENT in turn.output:
        lead = pieces(turn.output[:turn.output.index(CONTENT)])
        for a, b in itertools.pairwise(lead):
            if _closing_form(a) == b:
                fmt.start, fmt.end, fmt.evidence = a, b, "empty block in the rendered turn"
                return
    for prompt in (on, prompts.get("default")):
        tail = pieces(prompt[-200:]) if prompt else []
        if tail and _closing_form(tail[-1]) and _closing_form(tail[-1]) in r.template.source:
            fmt.start, fmt.end = tail[-1], _closing_form(tail[-1])
            fmt.evidence = "generation prompt (opens the block)"
            return


def _closing_form(tag: str) -> str:
    """``<think>`` → ``</think>``, ``[THINK]`` → ``[/THINK]``, ``<|START_X|>`` → ``<|END_X|>``."""
    if tag.startswith("<|START_") and tag.endswith("|>"):
        return "<|END_" + tag[len("<|START_"):]
    if tag.startswith("<") and tag.endswith(">") and not tag.startswith("</") and balanced(tag) and len(tag) > 2:
        return "</" + tag[1:]
    if tag.startswith("[") and tag.endswith("]") and not tag.startswith("[/") and len(tag) > 2:
        return "[/" + tag[1:]
    return ""


def _ends_open(prompt: str, fmt: ReasoningFormat) -> bool:
    tail = prompt.rstrip()
    return bool(fmt.start and tail.endswith(fmt.start.rstrip()))


def _content_wrappers(r: Renderer, result: TemplateAnalysis, fmt: ReasoningFormat) -> tuple[str, ...]:
    """Markup around the content in a plain answer (``<|START_RESPONSE|>``, ``<|content|>``)."""
    turn = result.content_turn
    if turn is None or CONTENT not in turn.output:
        return ()
    lead = turn.output[:turn.output.index(CONTENT)]
    found = [p for p in pieces(lead) if is_markup(p) and p not in (fmt.start, fmt.end)]
    call = result.turns.get(ONE_CALL.label)
    if call is not None and CONTENT in turn.full:
        # what follows the content but not the calls: a closing wrapper (whole pieces of it)
        after = turn.full[turn.full.index(CONTENT) + len(CONTENT):]
        n = 0
        while n < min(len(after), len(call.full)) and after[-1 - n] == call.full[-1 - n]:
            n += 1
        cut = len(after) - n
        for a, b in piece_spans(after):
            if a < cut:
                found.append(after[a:b])
    cleaned = []
    for p in found:
        for marker in (fmt.start, fmt.end):
            if marker and marker in p and p != marker:
                p = p.replace(marker, "")
        if p.strip() and is_markup(p):
            cleaned.append(p.strip())
    return tuple(cleaned)


# ---------------------------------------------------------------------------------------- tools


def call_block(call: Turn, content: Turn | None) -> str:
    """The call markup of a turn: its output minus what a plain-content turn shares with it."""
    out = call.output
    if content is None:
        return out
    ref = content.output
    p = prefix_len(out, ref)
    if 0 < p < len(out) and not out[p - 1].isspace() and out[p - 1] not in ">]":
        # the shared part ends inside a word ("to=" before a recipient): the word belongs to the call
        while p > 0 and not out[p - 1].isspace() and out[p - 1] not in ">]":
            p -= 1
    s = min(suffix_len(out, ref), len(out) - p)
    return out[p:len(out) - s]


def _json_spans(text: str, lo: int, hi: int) -> list[tuple[int, int, Any]]:
    """Every JSON object that starts in ``text[lo:hi]``: (start, end, value)."""
    decoder = json.JSONDecoder()
    spans = []
    i = text.find("{", lo)
    while 0 <= i < hi:
        try:
            value, end = decoder.raw_decode(text, i)
            if isinstance(value, dict):
                spans.append((i, end, value))
        except ValueError:
            pass
        i = text.find("{", i + 1)
    return spans


def _holds(value: Any, call: Call) -> tuple[bool, bool]:
    """Whether a decoded object holds the call's name and its arguments (anywhere inside)."""
    name = args = False
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if item == dict(call.arguments):
                args = True
            for k, v in item.items():
                if k == call.name and v == dict(call.arguments):
                    name = args = True
                if v == call.name:
                    name = True
                if isinstance(v, str) and v.startswith("{"):
                    try:
                        if json.loads(v) == dict(call.arguments):
                            args = True
                    except ValueError:
                        pass
                stack.append(v)
        elif isinstance(item, list):
            stack.extend(item)
    return name, args


def _shape_of(obj: dict[str, Any], call: Call) -> JsonCallShape:
    args = dict(call.arguments)

    def is_args(v: Any) -> bool:
        if v == args:
            return True
        if isinstance(v, str):
            try:
                return bool(json.loads(v) == args)
            except ValueError:
                return False
        return False

    if call.name in obj and is_args(obj[call.name]):
        return JsonCallShape(name_keys=(), args_keys=(), nest_keys=(), name_is_key=True)
    nest = ""
    where = obj
    if not any(v == call.name for v in obj.values()):
        for k, v in obj.items():
            if isinstance(v, dict) and any(x == call.name for x in v.values()):
                nest, where = k, v
                break
    name_key = next((k for k, v in where.items() if v == call.name), "name")
    args_key = next((k for k, v in where.items() if is_args(v)), "arguments")
    id_key = next((k for k, v in obj.items() if v == call.id), None)
    return JsonCallShape(
        name_keys=tuple(dict.fromkeys((name_key, "name"))),
        args_keys=tuple(dict.fromkeys((args_key, "arguments", "parameters"))),
        nest_keys=(nest,) if nest else ("function",),
        id_keys=(id_key,) if id_key else (),
    )


@dataclass
class _Templated:
    text: str  # the block with placeholders
    extents: list[tuple[int, int]]  # per call: (first slot, end of last slot) in ``text``


def _rewrite(block: str, spans: list[tuple[int, int, str]]) -> tuple[str, list[int]]:
    """Replace non-overlapping spans by their placeholder; returns the text and each span's new position."""
    out: list[str] = []
    where: list[int] = []
    pos = 0
    length = 0
    for start, end, ph in spans:
        piece = block[pos:start]
        out.append(piece)
        length += len(piece)
        where.append(length)
        out.append(ph)
        length += len(ph)
        pos = end
    out.append(block[pos:])
    return "".join(out), where


def _value_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _call_spans(block: str, calls: tuple[Call, ...], fmt: ToolFormat,  # noqa: C901 — reads a rendered call back from the template's output: one branch per way templates write calls
                learn: bool) -> list[list[tuple[int, int, str]]] | None:
    """Per call, its slot spans (start, end, placeholder) in ``block``."""
    result: list[list[tuple[int, int, str]]] = []
    pos = 0
    for call in calls:
        spans: list[tuple[int, int, str]] = []
        objects = [s for s in _json_spans(block, pos, len(block))]
        args_span = next(((a, b) for a, b, v in objects if v == dict(call.arguments)), None)
        call_obj = None
        for a, b, v in objects:
            name, args = _holds(v, call)
            if name and args and (call_obj is None or (a >= call_obj[0] and b <= call_obj[1])):
                call_obj = (a, b, v)
        if call_obj is not None and (args_span is None or call_obj[0] < args_span[0] or call_obj[2] != dict(call.arguments)):
            a, b, v = call_obj
            if learn and fmt.shape is None:
                fmt.encoding, fmt.shape = "json-call", _shape_of(v, call)
            spans.append((a, b, P_CALL))
            end = b
            first = a
        elif args_span is not None:
            a, b = args_span
            name_at = block.rfind(call.name, pos, a)
            if name_at < 0:
                return None
            if learn and not fmt.encoding:
                fmt.encoding = "tag+json"
            spans += [(name_at, name_at + len(call.name), P_NAME), (a, b, P_ARGS)]
            first, end = name_at, b
        else:
            keys = [(k, _value_text(v)) for k, v in call.arguments.items()]
            k_at = block.find(keys[0][0], pos)
            if k_at < 0:
                return None
            name_at = block.rfind(call.name, pos, k_at)
            if name_at < 0:
                return None
            if fmt.params is None:
                return None
            if learn and not fmt.encoding:
                fmt.encoding = "tag+params"
            p = fmt.params
            region_start = block.rfind(p.key_start.strip(), name_at, k_at)
            if region_start < 0:
                return None
            at = k_at
            region_end = -1
            for key, value in keys:
                k = block.find(key, at)
                v = block.find(value, k + len(key)) if k >= 0 else -1
                if v < 0:
                    return None
                end_marker = p.value_end.replace(KEY, key).strip()
                e = block.find(end_marker, v + len(value))
                if e < 0:
                    return None
                region_end = e + len(end_marker)
                at = region_end
            spans += [(name_at, name_at + len(call.name), P_NAME), (region_start, region_end, P_PARAMS)]
            first, end = name_at, region_end
        # other mentions of the name before the call (a recipient header), and the call id
        name_pos = next((s for s, _, ph in spans if ph == P_NAME), first)
        extra: list[tuple[int, int, str]] = []
        i = block.find(call.name, pos)
        while 0 <= i < name_pos:
            extra.append((i, i + len(call.name), P_SKIP_NAME))
            i = block.find(call.name, i + 1)
        i = block.find(call.id, pos)
        while 0 <= i < end:
            if not any(s <= i < e for s, e, _ in spans):
                extra.append((i, i + len(call.id), P_ID))
            i = block.find(call.id, i + 1)
        spans = sorted(spans + extra)
        result.append(spans)
        pos = end
    return result


def _template(block: str, calls: tuple[Call, ...], fmt: ToolFormat, learn: bool = False) -> _Templated | None:
    per_call = _call_spans(block, calls, fmt, learn)
    if per_call is None:
        return None
    flat = [s for spans in per_call for s in spans]
    text, where = _rewrite(block, flat)
    extents = []
    k = 0
    for spans in per_call:
        first = where[k]
        last = where[k + len(spans) - 1] + 1
        extents.append((first, last))
        k += len(spans)
    return _Templated(text, extents)


def _learn_params(block: str, call: Call) -> Params | None:
    """Key/value markup from a call with two arguments."""
    (k1, v1), (k2, v2) = [(k, _value_text(v)) for k, v in call.arguments.items()]
    k1_at = block.find(k1)
    n_at = block.rfind(call.name, 0, k1_at)
    v1_at = block.find(v1, k1_at + len(k1))
    k2_at = block.find(k2, v1_at + len(v1))
    v2_at = block.find(v2, k2_at + len(k2))
    if min(k1_at, n_at, v1_at, k2_at, v2_at) < 0:
        return None
    name_to_key = block[n_at + len(call.name):k1_at]
    kv1 = block[k1_at + len(k1):v1_at]
    vk = block[v1_at + len(v1):k2_at].replace(k1, KEY)
    kv2 = block[k2_at + len(k2):v2_at]
    after = block[v2_at + len(v2):].replace(k2, KEY)
    tail_max = prefix_len(vk, after) if vk != after else len(vk)
    head_min = len(vk) - suffix_len(name_to_key, vk)
    i, j = split_between(vk, tail_max, head_min)
    value_end, key_start = vk[:i], vk[j:]
    if not key_start.strip() or not value_end.strip():
        return None
    attributes_end = ""
    if kv1 == kv2:
        kv_pieces = kv1.split()
        key_end = kv_pieces[0] if kv_pieces else kv1
        value_start = "".join(kv_pieces[1:])
        if len(kv_pieces) == 1 and len(pieces(kv1)) > 1:  # "</arg_key><arg_value>"
            key_end, value_start = pieces(kv1)[0], "".join(pieces(kv1)[1:])
    else:  # attributes that differ by type: '" string="true">' / '" string="false">'
        common = kv1[:prefix_len(kv1, kv2)]
        key_end = common.split()[0] if common.split() else common[:1]
        n = 0
        while n < min(len(kv1), len(kv2)) and kv1[-1 - n] == kv2[-1 - n]:
            n += 1
        tail = kv1[len(kv1) - n:]
        opener = max(tail.rfind("<"), tail.rfind("["))
        attributes_end = tail[opener:] if opener >= 0 and balanced(tail[opener:]) else tail[-1:]
        value_start = ""
    if not key_end:
        return None
    trim = kv1.endswith("\n") and value_end.startswith("\n")
    return Params(key_start=key_start.strip(), key_end=key_end, value_end=value_end.strip(),
                  value_start=value_start.strip(), attributes_end=attributes_end, trim_newline=trim)


def analyse_tools(result: TemplateAnalysis) -> ToolFormat | None:
    content = result.content_turn
    blocks = {label: call_block(turn, content) for label, turn in result.turns.items()}
    result.blocks = blocks
    fmt = ToolFormat()
    one = blocks[ONE_CALL.label]
    if TWO_ARGS.label in blocks:
        two_args = blocks[TWO_ARGS.label]
        if not _json_spans(two_args, 0, len(two_args)):
            fmt.params = _learn_params(two_args, TWO_ARGS.calls[0])
    t1 = _template(one, ONE_CALL.calls, fmt, learn=True)
    if t1 is None:
        fmt.notes.append("the call's name or arguments could not be located in the render")
        return fmt
    t2 = _template(blocks[TWO_CALLS.label], TWO_CALLS.calls, fmt) if TWO_CALLS.label in blocks else None
    if t2 is None:
        fmt.single_call_only = TWO_CALLS.label not in blocks
        first, last = t1.extents[0]
        fmt.call_open, fmt.call_close = t1.text[:first], t1.text[last:]
        fmt.pattern = t1.text[first:last]
    else:
        (a1, b1), (a2, b2) = t2.extents
        open_, between, close = t2.text[:a1], t2.text[b1:a2], t2.text[b2:]
        tail_max = prefix_len(between, close) if between != close else len(between)
        head_min = len(between) - (suffix_len(open_, between) if open_ != between else len(between))
        i, j = split_between(between, tail_max, head_min)
        fmt.call_close, fmt.separator, fmt.call_open = between[:i], between[i:j], between[j:]
        fmt.section = (open_[:len(open_) - len(fmt.call_open)] if open_.endswith(fmt.call_open) else open_,
                       close.removeprefix(fmt.call_close))
        if not open_.endswith(fmt.call_open) or not close.startswith(fmt.call_close):
            fmt.notes.append("two calls are not written like one call repeated")
        inner1, inner2 = t2.text[a1:b1], t2.text[a2:b2]
        fmt.pattern = _index_slots(inner1, inner2)
    _id_placement(fmt)
    if fmt.shape is not None:
        _json_layout(fmt)
    fmt.generic = _safe(lambda: build_generic(fmt))
    fmt.wire = _safe(lambda: build_wire(fmt))
    other = blocks.get(OTHER_NAME.label)
    if other is not None:
        t4 = _template(other, OTHER_NAME.calls, fmt)
        if t4 is None or t4.text != t1.text:
            fmt.notes.append("a call to another function renders differently")
    return fmt


def _index_slots(inner1: str, inner2: str) -> str:
    """Where the two calls' inner text differs by a number (Kimi's ``:0`` / ``:1``): an index slot."""
    if inner1 == inner2:
        return inner1
    n = 0
    while n < min(len(inner1), len(inner2)) and inner1[n] == inner2[n]:
        n += 1
    m = 0
    while m < min(len(inner1), len(inner2)) - n and inner1[-1 - m] == inner2[-1 - m]:
        m += 1
    mid1, mid2 = inner1[n:len(inner1) - m], inner2[n:len(inner2) - m]
    while mid1 and mid2 and mid1[0].isdigit() is False and mid1[0] == mid2[0]:
        mid1, mid2 = mid1[1:], mid2[1:]
    if mid1.isdigit() and mid2.isdigit():
        return inner1[:n] + P_INDEX + inner1[len(inner1) - m:]
    return inner1


def _id_placement(fmt: ToolFormat) -> None:
    text = fmt.call_open + fmt.pattern + fmt.call_close
    if fmt.shape is not None and fmt.shape.id_keys:
        fmt.call_id = "json"
    elif P_ID in text:
        first_name = text.find(P_NAME)
        first_args = min((text.find(p) for p in (P_ARGS, P_PARAMS) if p in text), default=len(text))
        at = text.find(P_ID)
        fmt.call_id = "before name" if at < first_name else ("after name" if at < first_args else "after args")


def _json_layout(fmt: ToolFormat) -> None:
    """JSON calls: a list (``[call, call]`` after the section opener) or objects one after another."""
    opener, closer = (fmt.section[0] + fmt.call_open).rstrip(), (fmt.call_close + fmt.section[1]).lstrip()
    if opener.endswith("[") and closer.startswith("]") and fmt.separator.strip() in (",", ""):
        fmt.json_list = True
        fmt.section = (opener, closer)
        fmt.call_open = fmt.call_close = ""
        fmt.separator = fmt.separator or ", "


# ---------------------------------------------------------------------------------------- builders


def pattern_parts(text: str) -> tuple[str | Slot, ...]:
    """A placeholder text as literal parts and slots."""
    parts: list[str | Slot] = []
    lit: list[str] = []
    for ch in text:
        if ch in _SLOT_OF:
            if lit:
                parts.append("".join(lit))
                lit = []
            parts.append(Slot(_SLOT_OF[ch]))
        else:
            lit.append(ch)
    if lit:
        parts.append("".join(lit))
    return tuple(parts)


def build_generic(fmt: ToolFormat) -> GenericFormat | None:
    if fmt.encoding == "json-call" and fmt.shape is not None:
        if fmt.json_list:
            return GenericFormat(call=(Slot(CALL),), section=fmt.section, json_list=True, shape=fmt.shape)
        call = pattern_parts(fmt.call_open + P_CALL + fmt.call_close)
        return GenericFormat(call=call, section=fmt.section, separator=fmt.separator, shape=fmt.shape)
    parts = pattern_parts(fmt.call_open + fmt.pattern + fmt.call_close)
    return GenericFormat(call=parts, section=fmt.section, separator=fmt.separator, params=fmt.params)


def _lit(text: str) -> str:
    return text.replace("$", "$$")


def build_wire(fmt: ToolFormat) -> WireFormat | None:
    """The learned format as a ``WireFormat`` (for constrained decoding and tests)."""
    if fmt.encoding == "json-call" and fmt.shape is not None:
        s = fmt.shape
        if s.name_is_key:
            body = '{"$name": $args}'
        else:
            inner = f'"{_lit(s.name_keys[0])}": "$name", "{_lit(s.args_keys[0])}": $args'
            nest = s.nest_keys[0] if s.nest_keys and s.nest_keys != ("function",) else ""
            body = "{" + (f'"{_lit(nest)}": {{{inner}}}' if nest else inner) + "}"
        if fmt.json_list:
            return WireFormat(body, section=(_lit(fmt.section[0]), _lit(fmt.section[1])), separator=fmt.separator)
        return WireFormat(_lit(fmt.call_open) + body + _lit(fmt.call_close),
                          section=(_lit(fmt.section[0]), _lit(fmt.section[1])), separator=_lit(fmt.separator))
    text = fmt.call_open + fmt.pattern + fmt.call_close
    call = "".join(_WIRE_OF.get(ch, _lit(ch)) for ch in text)
    args: ArgsEncoding = JSON_ARGS
    if fmt.params is not None:
        p = fmt.params
        if p.attributes_end or KEY in p.value_end:
            return None
        nl = "\n" if p.trim_newline else ""
        params = _lit(p.key_start) + "$key" + _lit(p.key_end) + _lit(p.value_start) + nl + "$value" + nl \
            + _lit(p.value_end) + "\n"
        args = XmlParams(params, string_end=nl + p.value_end, forbidden=(p.value_end,))
    wire = WireFormat(call, section=(_lit(fmt.section[0]), _lit(fmt.section[1])), separator=_lit(fmt.separator),
                      args=args)
    Template(wire.call).substitute(name="f", args="{}", index="0")  # malformed templates fail here
    return wire
