"""``--reasoning-parser auto`` / ``--tool-call-parser auto``: learn the output format from the chat template.

    report = analyse_template(ChatTemplate.load("tokenizer_config.json"))
    report.reasoning.parser, report.tools.parser      # registry names, detector classes, or None
    print(report.as_text())                           # `toolwire inspect-template PATH`

Three steps (see the modules):

1. ``analysis`` renders the template with sentinel variations and diffs the renders: reasoning
   markers and whether the generation prompt opens the block, content wrappers, the call section,
   per-call markup, separator, name prefix/suffix, argument encoding, call-id placement.
2. ``select`` picks a registered detector that reads the template's own renders back, or builds a
   generic one from the learned format (``parsers.shapes.generic``); ``known_templates`` holds the few
   templates whose renders cannot show the format.
3. ``Report`` says what was found and why each parser was chosen.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from app.parser_choice import ParserChoice
from app.templates.autodetect.analysis import TemplateAnalysis, analyse
from app.templates.autodetect.known_templates import Known, known_for
from app.templates.autodetect.select import Selection, choose_reasoning, choose_tools, rerank_reasoning
from app.templates.chat_template import ChatTemplate

__all__ = ["Report", "analyse_template", "analyse_template_file", "choose_parsers"]


@dataclass
class Report:
    name: str
    analysis: TemplateAnalysis
    reasoning: Selection
    tools: Selection
    known: list[Known] = field(default_factory=list)  # the exceptions that were applied

    def choice(self) -> ParserChoice:
        return ParserChoice(reasoning=self.reasoning.parser, tools=self.tools.parser,
                            why={"reasoning": self.reasoning.why, "tools": self.tools.why})

    def as_dict(self) -> dict[str, Any]:
        a = self.analysis
        return {
            "template": self.name,
            "tools_in_prompt": a.tools_in_prompt,
            "calls_rendered": a.calls_rendered,
            "reasoning_format": a.reasoning.as_dict() if a.reasoning else None,
            "tool_format": a.tools.as_dict() if a.tools else None,
            "known_template": [k.name for k in self.known],
            "reasoning_parser": _selection_dict(self.reasoning),
            "tool_call_parser": _selection_dict(self.tools),
            "render_errors": dict(a.errors),
        }

    def as_text(self) -> str:
        a = self.analysis
        lines = [f"template: {self.name}"]
        r = a.reasoning
        if r is not None:
            opened = ", ".join(mode for mode, value in r.forced_open.items() if value) or "never"
            lines += ["reasoning:", f"  start: {r.start!r}", f"  end: {r.end!r}",
                      f"  opened by the generation prompt: {opened}", f"  learned from: {r.evidence}"]
            if r.content_markup:
                lines.append(f"  content markup: {', '.join(repr(m) for m in r.content_markup)}")
        else:
            lines.append("reasoning: none found")
        t = a.tools
        lines.append(f"tools: listed in the prompt: {'yes' if a.tools_in_prompt else 'no'}; "
                     f"calls rendered: {'yes' if a.calls_rendered else 'no'}")
        if t is not None:
            prefix, suffix = t.name_affixes()
            lines += [f"  encoding: {t.encoding or '?'}", f"  call: {t.readable_pattern()!r}",
                      f"  function name between {prefix!r} and {suffix!r}"]
            if t.section != ("", ""):
                lines.append(f"  section: {t.section[0]!r} … {t.section[1]!r}")
            if t.separator:
                lines.append(f"  separator: {t.separator!r}")
            if t.json_list:
                lines.append("  calls form one JSON list")
            if t.shape is not None:
                s = t.shape
                lines.append("  name is the object's key" if s.name_is_key else
                             f"  name key: {s.name_keys[0]!r}, arguments key: {s.args_keys[0]!r}"
                             + (f", nested in {s.nest_keys[0]!r}" if s.nest_keys != ("function",) else ""))
            if t.params is not None:
                p = t.params
                lines.append(f"  arguments: {p.key_start}KEY{p.key_end}{p.value_start}VALUE{p.value_end}"
                             + (" (one newline around values is markup)" if p.trim_newline else ""))
            lines.append(f"  call id: {t.call_id}" + ("; one call per turn" if t.single_call_only else ""))
            lines += [f"  note: {n}" for n in t.notes]
        if self.known:
            lines.append("known template: " + ", ".join(k.name for k in self.known))
        lines += [f"reasoning parser: {self.reasoning.label or 'none'}", f"  why: {self.reasoning.why}",
                  f"tool-call parser: {self.tools.label or 'none'}", f"  why: {self.tools.why}"]
        for title, sel in (("reasoning", self.reasoning), ("tool-call", self.tools)):
            failed = [c for c in sel.checks if not c.ok]
            if sel.checks:
                lines.append(f"{title} checks: {len(sel.checks) - len(failed)}/{len(sel.checks)} renders read back")
            lines += [f"  failed {c.what}: {c.detail}" for c in failed]
            if len(sel.fitting) > 1:
                lines.append(f"  also fitting: {', '.join(n for n in sel.fitting if n != sel.parser)}")
        return "\n".join(lines)


def _selection_dict(sel: Selection) -> dict[str, Any]:
    return {"parser": sel.label, "kind": sel.kind, "why": sel.why, "fitting": sel.fitting,
            "checks": [{"what": c.what, "ok": c.ok, "detail": c.detail} for c in sel.checks]}


def analyse_template(template: ChatTemplate) -> Report:
    """Analyse a template and choose its parsers."""
    analysis = analyse(template)
    known = known_for(template.source)
    reasoning, fitting = choose_reasoning(analysis, known)
    tools = choose_tools(analysis, known, reasoning.parser)
    rerank_reasoning(reasoning, fitting, analysis.reasoning, tools.parser)
    applied = [k for k in known if f"known template ({k.name})" in reasoning.why + tools.why]
    return Report(template.name, analysis, reasoning, tools, applied)


@lru_cache(maxsize=16)
def _cached(source: str) -> Report:
    return analyse_template(ChatTemplate(source, name="template"))


def choose_parsers(source: str) -> ParserChoice:
    """``ParserChoice`` for a chat template's source (cached per source)."""
    return _cached(source).choice()


def analyse_template_file(path: str | Path) -> Report:
    """``toolwire inspect-template``: a ``.jinja`` file, a ``tokenizer_config.json`` or a model directory."""
    return analyse_template(ChatTemplate.load(path))
