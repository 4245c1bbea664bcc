"""Choosing parsers for an analysed template: a registered detector when one reads the template's
own renders back, else a generic detector built from the learned format, else nothing.

A parser *fits* a template when every rendered variation parses back to what was rendered: the
same calls (names and arguments), the same content, the same reasoning — through the same chain
the server runs (``build_response_parser`` with the rendered prompt). Registered detectors are the
reference implementations, so they are tried first; among those that fit, the one whose markers
the template uses most wins (``qwen25`` over ``mimo``, which also reads ``<tool_call>`` JSON), then
registry order. A format known only from the generation prompt (reasoning the template never
renders) is checked on an output written in the learned markers.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from app.templates.autodetect.analysis import ReasoningFormat, TemplateAnalysis
from app.templates.autodetect.generic import reasoning_detector, tool_detector
from app.templates.autodetect.known_templates import Known
from app.templates.autodetect.render import CONTENT, ONE_CALL, REASONING, TOOLS, WITH_REASONING, Turn
from parsers.fold import FoldedMessage, fold
from parsers.registry import REASONING_PARSERS, TOOL_PARSERS, reasoning_detector_class, tool_detector_class
from parsers.response import build_response_parser

Parser = str | type | None


@dataclass
class Check:
    what: str
    ok: bool
    detail: str = ""


@dataclass
class Selection:
    parser: Parser = None
    why: str = ""
    kind: str = "none"  # "registered" | "generic" | "known" | "none"
    checks: list[Check] = field(default_factory=list)
    fitting: list[str] = field(default_factory=list)  # registered parsers that fit

    @property
    def label(self) -> str | None:
        if self.parser is None or isinstance(self.parser, str):
            return self.parser
        return str(getattr(self.parser, "label", self.parser.__name__))


# ---------------------------------------------------------------------------------------- parsing


def parse(output: str, prompt: str | None, tool_parser: Parser, reasoning_parser: Parser,
          tools: Sequence[Any] = TOOLS) -> FoldedMessage:
    """One whole output through the server's parser chain."""
    chain = build_response_parser(tools, tool_parser, reasoning_parser, prompt)
    return fold(chain.feed(output) + chain.end())


def _args(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def compare(message: FoldedMessage, turn: Turn) -> tuple[str, str]:
    """``(problem, note)``: what differs between a parsed message and the rendered variant ("" when
    nothing), and what was tolerated.

    Text the template left out of the render (content next to calls, say) is not expected back.
    Tolerated: special tokens ending the output left as content (``<|eom_id|>``: end-of-turn
    tokens the backend stops at); the content of a turn with calls read as something else (some
    templates render it as a separate message after the prompt opened reasoning)."""
    variant = turn.variant
    got = [(c.name, _args(c.arguments)) for c in message.calls]
    want = [(c.name, dict(c.arguments)) for c in variant.calls]
    if got != want:
        return f"calls {got!r} != {want!r}", ""
    content = variant.content if variant.content and variant.content in turn.output else ""
    reasoning = variant.reasoning if variant.reasoning and variant.reasoning in turn.output else ""
    got_content, got_reasoning = message.content.strip(), message.reasoning.strip()
    stop = trailing_stop_tokens(got_content, turn.output)
    notes = [f"stop tokens left as content: {stop!r}"] if stop else []
    if stop:
        got_content = got_content[:len(got_content) - len(stop)].strip()
    if not reasoning and not got_content and got_reasoning == content:
        got_content, got_reasoning = content, ""  # the prompt left reasoning open: text before calls is reasoning
    problem = ""
    if got_content != content:
        problem = f"content {message.content!r}"
    elif got_reasoning != reasoning:
        problem = f"reasoning {message.reasoning!r}"
    if problem and variant.calls and variant.content:
        return "", f"content next to calls not read back ({problem})"
    return problem, "; ".join(notes)


def trailing_stop_tokens(text: str, output: str) -> str:
    """Special tokens (``<|eom_id|>``, ``<｜end▁of▁sentence｜><｜Assistant｜>``) that end both the
    parsed content and the output: end-of-turn tokens the backend stops at and never sends."""
    match = _STOP_TOKENS.search(text)
    found = match.group().strip() if match else ""
    if found and output.rstrip().endswith(found):
        return found
    return ""


_STOP_TOKENS = re.compile(r"(?:<[^<>\s]+>\s*)+$")


def check_turns(turns: Iterable[Turn], tool_parser: Parser, reasoning_parser: Parser) -> list[Check]:
    checks = []
    for turn in turns:
        try:
            problem, note = compare(parse(turn.output, turn.prompt, tool_parser, reasoning_parser), turn)
        except Exception as exc:  # noqa: BLE001 - a failing candidate is simply not a fit
            problem, note = f"{type(exc).__name__}: {exc}", ""
        checks.append(Check(f"{turn.variant.label}/{turn.mode}", not problem, problem or note))
    return checks


def reasoning_samples(analysis: TemplateAnalysis) -> list[Turn]:
    """Rendered reasoning turns, or — when the template never renders reasoning — one written in
    the learned markers after the generation prompt that opens (or does not open) the block."""
    fmt = analysis.reasoning
    if fmt is None:
        return []
    if fmt.samples:
        return list(fmt.samples.values())
    return synthetic_reasoning(analysis, fmt)


def synthetic_reasoning(analysis: TemplateAnalysis, fmt: ReasoningFormat) -> list[Turn]:
    out = []
    for mode in ("on", "default"):
        prompt = analysis.renderer.prompt(mode)
        if prompt is None or not fmt.end:
            continue
        opened = fmt.forced_open.get(mode, False) or not fmt.start
        text = ("" if opened or fmt.start is None else fmt.start + "\n") + REASONING + "\n" + fmt.end + "\n\n" + CONTENT
        out.append(Turn(WITH_REASONING, mode, prompt, prompt + text, text))
        break
    return out


# ---------------------------------------------------------------------------------------- reasoning


def _reasoning_candidates(fmt: ReasoningFormat) -> list[str]:
    names = []
    for name in REASONING_PARSERS:
        cls = reasoning_detector_class(name)
        if fmt.end in cls.ends() and (fmt.start is None or fmt.start in cls.start):
            names.append(name)
    return names


def choose_reasoning(analysis: TemplateAnalysis, known: Sequence[Known]) -> tuple[Selection, list[str]]:
    """The reasoning parser, and every registered one that fits (for a later tie-break)."""
    override = next((k for k in known if k.reasoning is not None and k.override), None)
    if override is not None:
        return _known_reasoning(analysis, override), []
    fmt = analysis.reasoning
    if fmt is None:
        fill = next((k for k in known if k.reasoning is not None), None)
        if fill is not None:
            return _known_reasoning(analysis, fill), []
        return Selection(None, "the template renders no reasoning markers"), []
    samples = reasoning_samples(analysis)
    fitting = []
    first_checks: list[Check] = []
    for name in _reasoning_candidates(fmt):
        checks = check_turns(samples, None, name)
        if all(c.ok for c in checks):
            fitting.append(name)
            first_checks = first_checks or checks
    if fitting:
        best = _rank_reasoning(fitting, fmt)
        return Selection(best[0], f"{_describe(fmt)}: registered parser {best[0]!r} reads the renders back",
                         "registered", first_checks, best), best
    cls = reasoning_detector(fmt)
    checks = check_turns(samples, None, cls)
    if all(c.ok for c in checks):
        return Selection(cls, f"{_describe(fmt)}: no registered parser matches; built {getattr(cls, 'label', cls.__name__)}", "generic",
                         checks), []
    return Selection(None, f"{_describe(fmt)}: no parser reads the renders back", "none", checks), []


def _describe(fmt: ReasoningFormat) -> str:
    opened = " (opened by the generation prompt)" if fmt.forced_open.get("default") else ""
    return f"reasoning {fmt.start or '…'} … {fmt.end}{opened}, from the {fmt.evidence}"


def _rank_reasoning(names: list[str], fmt: ReasoningFormat, tool_name: str | None = None) -> list[str]:
    def key(item: tuple[int, str]) -> tuple[int, int, int, int]:
        order, name = item
        cls = reasoning_detector_class(name)
        exact = set(cls.start) == ({fmt.start} if fmt.start else set(cls.start)) and set(cls.ends()) == {fmt.end}
        markup = set(fmt.content_markup) <= set(cls.content_markup)
        forced = bool(cls.force_reasoning) == bool(fmt.forced_open.get("default"))
        return (-(exact and markup), -_affinity(name, tool_name), -forced, order)

    return [name for _, name in sorted(enumerate(names), key=key)]


def _affinity(a: str, b: str | None) -> int:
    """1 when two parser names share a family word (``deepseek-r1``/``deepseekv3``,
    ``glm45``/``glm47``; not ``minimax``/``minicpm5``)."""
    if not b:
        return 0
    fa, fb = (re.match(r"[a-z]*", x.lower()).group() for x in (a, b))  # type: ignore[union-attr]
    short, long_ = sorted((fa, fb), key=len)
    return int(len(short) >= 3 and long_.startswith(short))


def rerank_reasoning(selection: Selection, fitting: list[str], fmt: ReasoningFormat | None,
                     tool_parser: Parser) -> None:
    """Among equally fitting registered reasoning parsers, prefer the tool parser's family."""
    if selection.kind != "registered" or fmt is None or not isinstance(tool_parser, str) or len(fitting) < 2:
        return
    best = _rank_reasoning(fitting, fmt, tool_parser)[0]
    if best != selection.parser:
        selection.why = selection.why.replace(repr(selection.parser), repr(best))
        selection.parser = best


def _known_reasoning(analysis: TemplateAnalysis, known: Known) -> Selection:
    spec = known.reasoning
    if isinstance(spec, ReasoningFormat):
        cls = reasoning_detector(spec)
        checks = check_turns(synthetic_reasoning(analysis, spec), None, cls)
        return Selection(cls, f"known template ({known.name}): {known.why}; built {getattr(cls, 'label', cls.__name__)}", "known", checks)
    samples = reasoning_samples(analysis)
    checks = check_turns(samples, None, spec) if samples else []
    return Selection(spec, f"known template ({known.name}): {known.why}", "known", checks)


# ---------------------------------------------------------------------------------------- tools


def _tool_candidates() -> list[str]:
    """Registered names, one per detector class, in registry order."""
    seen: set[str] = set()
    names = []
    for name, path in TOOL_PARSERS.items():
        if path not in seen:
            seen.add(path)
            names.append(name)
    return names


def _coverage(cls: Any, blocks: Iterable[str]) -> float:
    markers = [m for m in cls.markers if m.strip()]
    if not markers:
        return 0.0
    text = "".join(blocks)
    return sum(1 for m in markers if m in text) / len(markers)


def _wire_match(cls: Any, blocks: dict[str, str]) -> int:
    """How much of the template's own render of one call the detector's wire format writes
    verbatim (the detector made for this template writes it exactly)."""
    wire = getattr(cls, "wire", None)
    block = blocks.get(ONE_CALL.label, "")
    if wire is None or not block:
        return 0
    try:
        text = wire.render([(c.name, c.arguments) for c in ONE_CALL.calls])
    except Exception:  # noqa: BLE001
        return 0
    for candidate in (text, text.strip()):
        if candidate and candidate in block:
            return len(candidate)
    return 0


def choose_tools(analysis: TemplateAnalysis, known: Sequence[Known], reasoning: Parser) -> Selection:
    override = next((k for k in known if k.tools and k.override), None)
    if override is not None:
        return Selection(override.tools, f"known template ({override.name}): {override.why}", "known")
    if not analysis.calls_rendered:
        fill = next((k for k in known if k.tools), None)
        if fill is not None:
            return Selection(fill.tools, f"known template ({fill.name}): {fill.why}", "known")
        if analysis.tools_in_prompt:
            return Selection(None, "the template lists tools but does not render an assistant's tool calls")
        return Selection(None, "the template has no tool support (tools and calls are not rendered)")
    turns = list(analysis.turns.values())
    blocks = list(analysis.blocks.values()) or [t.output for t in turns]
    named_blocks = analysis.blocks
    fitting: list[tuple[int, int, float, int, str, list[Check]]] = []
    for order, name in enumerate(_tool_candidates()):
        cls = tool_detector_class(name)
        try:
            if not any(cls(()).has_tool_call(t.output) for t in turns):
                continue
        except Exception:  # noqa: BLE001, S112 — a detector that cannot even scan the turns is not a candidate
            continue
        checks = check_turns(turns, name, reasoning)
        if all(c.ok for c in checks):
            clean = all(not c.detail for c in checks)
            fitting.append((-clean, -_wire_match(cls, named_blocks), -_coverage(cls, blocks), order, name, checks))
    fmt = analysis.tools
    shape = f"calls like {fmt.readable_pattern()!r}" if fmt is not None and fmt.pattern else "calls"
    if fitting:
        fitting.sort(key=lambda f: f[:4])
        best, checks = fitting[0][4], fitting[0][5]
        return Selection(best, f"{shape}: registered parser {best!r} reads the renders back", "registered", checks,
                         [f[4] for f in fitting])
    if fmt is not None and fmt.generic is not None:
        cls = tool_detector(fmt)
        checks = check_turns(turns, cls, reasoning)
        if all(c.ok for c in checks):
            return Selection(cls, f"{shape}: no registered parser matches; built {getattr(cls, 'label', cls.__name__)}", "generic", checks)
        return Selection(None, f"{shape}: the generic parser does not read the renders back", "none", checks)
    note = "; ".join(fmt.notes) if fmt is not None and fmt.notes else "the format could not be learned"
    return Selection(None, f"no registered parser reads the renders back and {note}")
