"""Templates whose renders do not show what the model writes: a small, named table of exceptions.

The differential analysis learns a format from what a template *renders*. A few templates never
render it (the calls or the reasoning live only in the model's own text, or in a prompt
description), render it in a way no diff can read (Harmony's message headers), or fail to render
it at all. Each exception below is keyed on the template's text and says why it exists.

``override=True`` replaces what the analysis found; otherwise the exception only fills in what
the analysis could not learn (so a later template that does render its calls is analysed as
usual).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from app.templates.autodetect.analysis import ReasoningFormat


@dataclass(frozen=True)
class Known:
    name: str
    matches: Callable[[str], bool]  # on the template source
    why: str
    tools: str | None = None  # a registered tool-call parser
    reasoning: str | ReasoningFormat | None = None  # a registered reasoning parser, or a format to build
    override: bool = False


def _all(*needles: str) -> Callable[[str], bool]:
    return lambda source: all(n in source for n in needles)


def _any(*needles: str) -> Callable[[str], bool]:
    return lambda source: any(n in source for n in needles)


KNOWN: tuple[Known, ...] = (
    # Beam: a Harmony-like envelope whose call bodies are <rfl:parameter> XML (SGLang detects it by
    # these two markers); before `harmony`, whose JSON call bodies it would otherwise be read with.
    Known("beam", _all("<|channel|>", "<rfl:parameter"),
          "Beam's Harmony-like messages: calls to bare names with <rfl:parameter> XML bodies",
          tools="beam", reasoning="beam", override=True),
    # Harmony: a call is a whole message addressed to functions.NAME (the recipient sits in the
    # message header, around the channel), and reasoning is the analysis channel, which the
    # template drops from the last turn; the gpt-oss program reads the headers and the prompt's tail.
    Known("harmony", _all("<|channel|>", "<|message|>", "assistant to="),
          "Harmony message format (gpt-oss): calls and reasoning are channels of messages",
          tools="gpt-oss", reasoning="gpt-oss", override=True),
    # K2 Horizon (IFM): tool_call_format picks one of three call spellings (key/value tags, typed
    # tags, JSON), reasoning_effort one of three think tag pairs, and the template calls a custom
    # validate_tools() global that a plain Jinja renderer lacks; the k2_horizon parsers read them all.
    Known("k2-horizon", _all("<ifm|tool_calls>", "<ifm|tool_call>", "<ifm|think>"),
          "K2 Horizon IFM tags: three call spellings and three think tag pairs, chosen by template settings",
          tools="k2_horizon", reasoning="k2_horizon", override=True),
    # Functionary v3.2: the generation prompt ends with ">>>", so a turn's first recipient carries
    # no marker in the output, and plain text is addressed to the recipient "all"; the diff would
    # see calls with no opening markup.
    Known("functionary-v3.2", _all(">>>all\\n", ">>>' + tool_call['function']['name']"),
          "Functionary v3.2 recipients (>>>NAME): the first one is in the generation prompt",
          tools="functionary_v32", override=True),
    # LFM2: the templates list the tools but render an assistant's calls only as its own text; the
    # model writes <|tool_call_start|>[pythonic calls]<|tool_call_end|>.
    Known("lfm2", _any("<|tool_list_start|>", "List of tools: ["),
          "LFM2 lists the tools but never renders calls; the model writes pythonic calls in <|tool_call_start|>",
          tools="lfm2"),
    # Granite 3.x: the system prompt describes the <|tool_call|> JSON list, but assistant calls are
    # never rendered; with thinking=True it asks for <think></think><response></response>, which is
    # never rendered either.
    Known("granite-3", _all("<|tool_call|>", "available_tools"),
          "Granite 3 describes <|tool_call|>[…] in its system prompt but never renders calls",
          tools="granite"),
    Known("granite-3-thinking", _all("<think></think>", "<response></response>"),
          "Granite 3.2/3.3 thinking (<think>…</think><response>…</response>) is only described, never rendered",
          reasoning="granite"),
    # Ministral 3 Reasoning / Magistral: the template renders reasoning only from structured content
    # blocks ({"type": "thinking"}), which OpenAI messages do not carry; the model writes [THINK]…[/THINK].
    Known("mistral-thinking", _all("'[THINK]' + block['thinking'] + '[/THINK]'"),
          "Mistral reasoning ([THINK]…[/THINK]) is rendered only from structured thinking blocks",
          reasoning="mistral"),
    # MiMo-VL thinks in <think>…</think>, but its template neither renders nor mentions reasoning.
    Known("mimo-vl", _all("You are MiMo, an AI assistant developed by Xiaomi."),
          "MiMo-VL writes <think>…</think>; the template never renders reasoning",
          reasoning="qwen3"),
    # Apertus: the template renders reasoning (<|inner_prefix|>…<|inner_suffix|>) only from block
    # content ({"blocks": [{"type": "thoughts"}, …]}), which OpenAI messages do not carry.
    Known("apertus", _all("'<|inner_prefix|>'", "'<|inner_suffix|>'"),
          "Apertus reasoning (<|inner_prefix|>…<|inner_suffix|>, calls inside it) is rendered only from block content",
          reasoning="apertus2509"),
    # Apriel 1.5: the system prompt asks for reasoning, then "[BEGIN FINAL RESPONSE] … [END FINAL
    # RESPONSE]"; the template never renders the reasoning, and it has no opening marker.
    Known("apriel-1.5", _all("[BEGIN FINAL RESPONSE] ... [END FINAL RESPONSE]"),
          "Apriel 1.5 reasons first, then answers in [BEGIN FINAL RESPONSE] … [END FINAL RESPONSE]",
          reasoning=ReasoningFormat(start=None, end="[BEGIN FINAL RESPONSE]",
                                    content_markup=("[END FINAL RESPONSE]",),
                                    forced_open={"default": True}, evidence="known template")),
)


def known_for(source: str) -> list[Known]:
    """The exceptions that apply to a template."""
    return [k for k in KNOWN if k.matches(source)]
