"""Resumed renders (``app.templates.resume``) are byte-identical to whole renders, on every real
template, over growing, rewritten and edited conversations — and the proof refuses the loops it
cannot vouch for.

Each template is rendered twice per step: whole, and continuing the render of the step before
(``Chain``: what the prefix service hands each render of one conversation).
"""

from __future__ import annotations

import json
import pickle
import random
from pathlib import Path

import orjson
import pytest

from app.conversation import Call, Turn
from app.formats import Formats
from app.jsontext import JsonText, body_pieces
from app.parser_choice import ParserChoice
from app.templates import chat_template
from app.templates import prompt as prompt_module
from app.templates.chat_template import ChatTemplate, TemplateError
from app.templates.prompt import TemplateProfile, json_call_text, render_conversation, template_messages
from app.templates.resume import SEPARATOR, NotProven, RenderState, RenderTooLarge, Resume, bounded, plan_of
from app.templates.resume import guards as resume_guards
from app.templates.resume import render as resumed_render
from bench.agent import agent_tools
from tests.data.render_cases import PINNED_NOW

ROOT = Path(__file__).resolve().parent.parent
DIRS = (ROOT / "tests" / "data" / "templates", ROOT.parent / "shared" / "templates")


def _templates() -> dict[str, str]:
    """Every template in the suite, once per distinct source."""
    found: dict[str, str] = {}
    for folder in DIRS:
        for path in sorted(folder.glob("*.jinja")) if folder.is_dir() else ():
            source = path.read_text(encoding="utf-8")
            if source not in found.values():
                found[f"{folder.parent.name}/{path.name}"] = source
    return found


TEMPLATES = _templates()
#: proven, and resumed (the byte-identity test also checks that they reuse earlier iterations)
AGENT_TEMPLATES = ("Qwen-Qwen3-0.6B.jinja", "Qwen-Qwen2.5-7B-Instruct.jinja", "Qwen3-Coder.jinja",
                   "meta-llama-Llama-3.1-8B-Instruct.jinja", "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja")


@pytest.fixture(autouse=True)
def pinned_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(chat_template, "_now", lambda: PINNED_NOW)


def agent_steps(with_reasoning: bool) -> list[list[Turn]]:
    """One conversation as its client sends it turn after turn: a system prompt, a task, calls and
    results (one parallel pair), reasoning handed back, a new user message in the middle."""
    turns = [Turn("system", "You are a coding agent."), Turn("user", "Fix the failing test.")]
    steps = [list(turns)]
    for i in range(7):
        calls = [Call(f"call{i}a000", "bash", json.dumps({"path": f"/repo/{i}", "mode": "fast"}))]
        if i == 3:
            calls.append(Call(f"call{i}b000", "grep", {"path": "/repo", "patterns": ["x<y>\"z\""]}))
        reasoning = f"step {i}: look at file {i}" if with_reasoning else None
        turns.append(Turn("assistant", "" if i % 2 else f"Checking {i}.", tuple(calls), reasoning))
        for call in calls:
            turns.append(Turn("tool", f"output of {call.name} {i}\nline two «é»", tool_call_id=call.id))
        if i == 4:  # the user speaks up mid-loop: templates that drop earlier reasoning rewrite the past
            turns.append(Turn("assistant", "Done with the first part.", reasoning=reasoning))
            turns.append(Turn("user", "Now the second part."))
        steps.append(list(turns))
    return steps


ENCODED: list[int] = []  # prompts that came with their own JSON encoding (resumed renders)


class Chain:
    """One conversation's renders, each continuing the one before (as ``app.prefix`` chains them)."""

    def __init__(self, template: ChatTemplate) -> None:
        self.template = template
        self.state: RenderState | None = None
        self.reused = 0  # iterations taken from the render before, over all renders

    def link(self) -> Resume:
        return Resume(self.state)

    def took(self, resume: Resume) -> None:
        self.state = resume.state
        self.reused += resume.reused

    def render(self, messages: list[dict], tools: list[dict] | None = None, **kwargs: object) -> str:
        resume = self.link()
        try:
            return self.template.render(messages, tools, resume=resume, kwargs=kwargs)
        finally:
            self.took(resume)

    def conversation(self, turns: list[Turn], tools: list[dict] | None, **kwargs: object) -> str:
        resume = self.link()
        try:
            return render_conversation(self.template, turns, tools, kwargs=kwargs, resume=resume)
        finally:
            self.took(resume)


def _render(template: ChatTemplate | Chain, turns: list[Turn], tools: list[dict] | None, **kwargs: object) -> str:
    try:
        if isinstance(template, Chain):
            prompt = template.conversation(turns, tools, **kwargs)
        else:
            prompt = render_conversation(template, turns, tools, kwargs=kwargs)
    except TemplateError as exc:
        return f"TemplateError: {exc}"
    if isinstance(prompt, JsonText):  # the body takes this encoding as it is: it must be exactly the prompt's
        assert prompt.json == orjson.dumps(str(prompt))
        ENCODED.append(1)
    return prompt


@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_resumed_renders_are_byte_identical(name: str) -> None:
    source = TEMPLATES[name]
    whole = ChatTemplate(source, "<BOS>", "<EOS>")
    resumed = Chain(ChatTemplate(source, "<BOS>", "<EOS>"))
    tools = agent_tools(3, 600)
    for with_tools in (True, False):
        for with_reasoning in (True, False):
            for kwargs in ({}, {"enable_thinking": False}):
                for turns in agent_steps(with_reasoning):
                    offered = tools if with_tools else None
                    assert _render(resumed, turns, offered, **kwargs) == _render(whole, turns, offered, **kwargs)
    # the same request again (every iteration reused), then an earlier message edited (a branch)
    steps = agent_steps(True)
    again = _render(resumed, steps[-1], tools)
    assert again == _render(whole, steps[-1], tools)
    edited = [Turn(t.role, t.text.replace("output of bash 1", "EDITED"), t.calls, t.reasoning, t.tool_call_id)
              for t in steps[-1]]
    assert _render(resumed, edited, tools) == _render(whole, edited, tools)
    # a trailing user message rewritten every turn (the last user turn moves on: captured values change)
    for i, turns in enumerate(steps):
        trailing = [*turns, Turn("user", f"reminder {i}")]
        assert _render(resumed, trailing, tools) == _render(whole, trailing, tools)
    # an early message edited every turn
    for i, turns in enumerate(steps):
        early = [turns[0], Turn("user", f"repo map {i}"), *turns[2:]]
        assert _render(resumed, early, tools) == _render(whole, early, tools)
    if name.split("/")[-1] in AGENT_TEMPLATES:
        assert resumed.reused > 0, "a proven template must reuse earlier iterations"
        assert ENCODED, "a resumed render carries its encoding"


def test_the_templates_agents_run_are_proven() -> None:
    """Where the gain matters most: these are proven (and so resumed); the proof is no formality."""
    proven = {name.split("/")[-1] for name, source in TEMPLATES.items()
              if ChatTemplate(source).loop_plan() is not None}
    for name in AGENT_TEMPLATES:
        assert name in proven
    assert len(proven) >= 30
    assert "Kimi-K2-Instruct.jinja" not in proven  # it builds lists with .append in its loop


LOOP = "{%- for message in messages %}"
END = "{%- endfor %}"


@pytest.mark.parametrize(("body", "why"), [
    ("{%- set ns.n = ns.n + 1 %}{{ ns.n }}", "namespace attribute"),
    ("{{ loop.length }}", "loop.length"),
    ("{{ loop.revindex }}", "loop.revindex"),
    ("{{ loop.changed(message.role) }}", "loop.changed"),
    ("{%- for x in [] %}{% else %}{{ loop.length }}{% endfor %}", "loop.length"),  # else: the main loop's
    ("{{ messages|length }}", "the sequence other than"),
    ("{{ messages[-1].content }}", "by something other"),
    ("{{ messages[loop.index0 * 2] }}", "by something other"),
    ("{%- if message.role == 'tool' %}{% break %}{% endif %}{{ message.content }}", "breaks"),
    ("{{ seen.append(message.role) }}", ".append()"),
    ("{{ strftime_now('%Y') }}", "strftime_now"),
    ("{{ [1, 2]|random }}", "random"),
    ("{{ counter() }}", "counter"),
])
def test_the_proof_refuses_loop_carried_state(body: str, why: str) -> None:
    env = ChatTemplate("x")._template.environment
    source = ("{%- set ns = namespace(n=0) %}{%- set seen = [] %}{%- set counter = joiner() %}"
              + LOOP + body + END)
    with pytest.raises(NotProven, match=why):
        plan_of(env, source)


def test_a_macro_reading_a_reassigned_name_is_refused() -> None:
    env = ChatTemplate("x")._template.environment
    source = ("{%- set x = messages[-1].content %}{%- macro m() %}{{ x }}{% endmacro %}{%- set x = 'later' %}"
              + LOOP + "{{ m() }}" + END)
    with pytest.raises(NotProven, match="reads 'x'"):
        plan_of(env, source)


def test_what_the_loop_reads_is_captured_and_compared() -> None:
    """A value computed before the loop from the whole conversation (Qwen3's last user turn) is
    compared on every render: when it changes, earlier iterations render again."""
    source = ("{%- set ns = namespace(last=0) %}{%- for m in messages %}{%- if m.role == 'user' %}"
              "{%- set ns.last = loop.index0 %}{%- endif %}{%- endfor %}"
              + LOOP + "{%- if loop.index0 < ns.last %}old:{% else %}new:{% endif %}{{ message.content }}|" + END)
    whole, resumed = ChatTemplate(source), Chain(ChatTemplate(source))
    plan = resumed.template.loop_plan()
    assert plan is not None and plan.captured == ("ns",)
    messages = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
    for more in ([], [{"role": "assistant", "content": "c"}], [{"role": "user", "content": "d"}]):
        messages = messages + more
        assert resumed.render(messages) == whole.render(messages)
    assert resumed.render(messages) == "old:a|old:b|old:c|new:d|"


def test_the_separator_in_the_data_falls_back_to_a_whole_render() -> None:
    source = TEMPLATES["data/Qwen-Qwen2.5-7B-Instruct.jinja"]
    whole, resumed = ChatTemplate(source), Chain(ChatTemplate(source))
    messages = [{"role": "user", "content": f"a{SEPARATOR}b"}, {"role": "assistant", "content": "ok"}]
    assert resumed.render(messages) == whole.render(messages)
    assert resumed.state is None


NUMBERS = "{%- for m in messages %}{{ m.n }}|{%- endfor %}"


@pytest.mark.parametrize("earlier", [
    [{"n": 1}, {"n": 2}, {"n": 9}],  # the same lengths, other bytes, past the items the key digests
    [{"n": 1}, {"n": 2}, {"n": True}],  # equal in Python (True == 1), not in the prompt
    [{"n": 1}, {"n": 2}, {"n": 1.0}],
    [{"n": 7}, {"n": 2}, {"n": 1}],  # within the items the key digests
])
def test_a_changed_earlier_message_is_not_reused(earlier: list[dict]) -> None:
    whole, resumed = ChatTemplate(NUMBERS), Chain(ChatTemplate(NUMBERS))
    now = [{"n": 1}, {"n": 2}, {"n": 1}, {"n": 4}]
    assert resumed.render(earlier) == whole.render(earlier)
    same = sum(1 for a, b in zip(earlier, now, strict=False) if a == b and type(a["n"]) is type(b["n"]))
    assert resumed.render(now) == whole.render(now) == "1|2|1|4|"
    assert resumed.reused == same  # the iterations whose item is the same at the same place, no other
    assert resumed.render([*now, {"n": 5}]) == "1|2|1|4|5|" and resumed.reused == same + 4


LOOP_READS = ("{%- for m in messages %}{{ loop.index0 }},{{ loop.index }},{{ loop.first }},{{ loop.last }},"
              "{{ loop.previtem.content if loop.previtem is defined else '-' }},"
              "{{ loop.nextitem.content if loop.nextitem is defined else '-' }},"
              "{{ '^' if loop.first else messages[loop.index0 - 1].content }},"
              "{{ messages[loop.index + 0].content if not loop.last else '$' }}:{{ m.content }}|{%- endfor %}")


def test_the_loop_reads_the_same_wherever_the_render_resumes() -> None:
    """The resumed loop runs over the items not reused; what its body reads of ``loop`` and of the
    items around it is what a whole render reads."""
    whole, resumed = ChatTemplate(LOOP_READS), Chain(ChatTemplate(LOOP_READS))
    messages = [{"content": f"m{i}"} for i in range(9)]
    for n in (1, 2, 3, 5, 6, 9, 9, 4):
        assert resumed.render(messages[:n]) == whole.render(messages[:n])
    edited = [*messages[:3], {"content": "edited"}, *messages[4:]]
    assert resumed.render(edited) == whole.render(edited)
    assert resumed.reused >= 15


@pytest.mark.parametrize("edits", [(0,), (8,), (2, 6), (0, 8), (1, 7), (3, 4)])
@pytest.mark.parametrize("grow", [0, 2])
def test_the_loop_reads_the_same_across_gaps(edits: tuple[int, ...], grow: int) -> None:
    """Edited messages far apart leave runs of iterations taken between iterations that run: what
    the body reads of ``loop`` (first, last, the items before and after) is still what a whole
    render reads, at either end and beside each gap — and so are new messages after them."""
    whole, resumed = ChatTemplate(LOOP_READS), Chain(ChatTemplate(LOOP_READS))
    messages = [{"content": f"m{i}"} for i in range(9)]
    assert resumed.render(messages) == whole.render(messages)
    edited = [{"content": f"edited {i}"} if i in edits else m for i, m in enumerate(messages)]
    edited += [{"content": f"new {i}"} for i in range(grow)]
    reused = resumed.reused
    assert resumed.render(edited) == whole.render(edited)
    assert resumed.reused > reused  # something was taken: the gaps were there


def test_an_early_edit_runs_only_the_iterations_around_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """A long conversation whose second message changes runs the loop body for the iterations that
    read it and for the new turn alone — not once more for every message between (each iteration
    that runs writes one separator into the raw output)."""
    source = TEMPLATES["data/Qwen-Qwen3-0.6B.jinja"]
    whole, resumed = ChatTemplate(source), Chain(ChatTemplate(source))
    turns = agent_steps(True)[-1]
    for i in range(40):
        call = Call(f"call{i}x000", "bash", json.dumps({"i": i}))
        turns = [*turns, Turn("assistant", f"step {i}", (call,)), Turn("tool", f"out {i}", tool_call_id=call.id)]
    assert _render(resumed, turns, None) == _render(whole, turns, None)
    raws: list[str] = []
    render = resumed_render.render
    monkeypatch.setattr(resumed_render, "render", lambda *a: raws.append(render(*a)) or raws[-1])
    call = Call("call99x000", "bash", "{}")
    edited = [turns[0], Turn("user", "Fix the failing test (edited)."), *turns[2:], Turn("assistant", "", (call,)),
              Turn("tool", "done", tool_call_id=call.id)]
    assert _render(resumed, edited, None) == _render(whole, edited, None)
    assert len(edited) > 80 and 2 < raws[0].count(SEPARATOR) <= 2 + 8


# ------------------------------------------------------------------ the reverse scan (``resume.scan``)

SCAN_TEMPLATES = ("Qwen-Qwen3-0.6B.jinja", "StepFun3.5-Flash.jinja", "inclusionai-ling-3.0-flash.jinja",
                  "openbmb-MiniCPM5-1B.jinja")


def _long_agent(n: int) -> list[Turn]:
    turns = [Turn("system", "You are a coding agent."), Turn("user", "Fix the failing test.")]
    for i in range(n):
        call = Call(f"call{i}x000", "bash", json.dumps({"i": i}))
        turns += [Turn("assistant", f"step {i}", (call,)), Turn("tool", f"out {i}", tool_call_id=call.id)]
    return turns


def _scanned(chain: Chain, turns: list[Turn], whole: ChatTemplate, tools: list[dict] | None = None) -> int:
    """Render ``turns`` continuing ``chain`` (the prompt must be the whole render's); how many
    iterations the reverse scan ran."""
    resume = chain.link()
    try:
        prompt = render_conversation(chain.template, turns, tools, resume=resume)
    finally:
        chain.took(resume)
    assert prompt == render_conversation(whole, turns, tools)
    return resume.scanned


@pytest.mark.parametrize("name", SCAN_TEMPLATES)
def test_the_reverse_scan_runs_only_where_it_can_answer_differently(name: str) -> None:
    """Qwen3's walk back to the last user query runs, turn after turn, over the new messages and
    the query's own place — not once per message — and gives the whole walk's answer however the
    conversation changes: grown, a new query, a tool result dressed as a query, the query edited,
    cut short."""
    source = next(text for path, text in TEMPLATES.items() if path.endswith("/" + name))
    whole, chain = ChatTemplate(source), Chain(ChatTemplate(source))
    assert chain.template.loop_plan() is not None and chain.template.loop_plan().scan is not None
    turns = _long_agent(40)
    assert _scanned(chain, turns, whole) == len(turns)  # nothing before it: the whole walk
    call = Call("callnewx000", "bash", "{}")
    turns += [Turn("assistant", "", (call,)), Turn("tool", "done", tool_call_id=call.id)]
    assert _scanned(chain, turns, whole) == 2 + 1  # the two new messages, the query's place
    turns += [Turn("user", "<tool_response>\nnot a query\n</tool_response>")]
    assert _scanned(chain, turns, whole) == 1 + 1
    turns += [Turn("user", "Now the docs.")]  # a new query: found among the new (the old one's place runs idle)
    assert _scanned(chain, turns, whole) == 1 + 1
    turns += [Turn("assistant", "ok", (Call("callx2x000", "bash", "{}"),)),
              Turn("tool", "out", tool_call_id="callx2x000")]
    assert _scanned(chain, turns, whole) == 2 + 1
    query = len(turns) - 3
    edited = [*turns[:query], Turn("user", "Now the docs, all of them."), *turns[query + 1:]]
    assert _scanned(chain, edited, whole) == query + 1  # the query changed: every place up to it
    assert _scanned(chain, edited[:query - 4], whole) == query - 4  # cut before the query: the whole walk
    early = [edited[0], Turn("user", "Fix the other test."), *edited[2:query - 4]]
    assert _scanned(chain, early, whole) == 2  # the edit is the query's own place


SCAN = ("{%- set ns = namespace(up=true, at=messages|length - 1) %}"
        "{%- for m in messages[::-1] %}{%- set i = (messages|length - 1) - loop.index0 %}"
        "{%- if ns.up and m.role == 'user' %}{%- set ns.up = false %}{%- set ns.at = i %}{%- endif %}"
        "{%- endfor %}")
SCAN_MAIN = LOOP + "{{ '*' if loop.index0 == ns.at }}{{ message.content }}|" + END


@pytest.mark.parametrize("scan", [
    SCAN.replace("m.role == 'user'", "m.role == 'user' and loop.index0 > 0"),  # a test reads the place
    SCAN.replace("ns.up and m.role == 'user'", "m.role == 'user' and ns.up"),  # the flag is not read first
    SCAN.replace("m.role == 'user'", "m.role == ns.role"),  # a test reads a value from outside
    SCAN.replace("{%- set ns.at = i %}{%- endif %}", "{%- endif %}{%- set ns.at = i %}"),  # written past the flag
    SCAN.replace("{%- set ns.up = false %}", ""),  # the flag never goes down
    SCAN.replace("{%- endif %}{%- endfor %}", "{%- endif %}{{ m.role }}{%- endfor %}"),  # it writes
    SCAN.replace("{%- endif %}{%- endfor %}", "{%- else %}{%- set ns.at = 0 %}{%- endif %}{%- endfor %}"),
    SCAN.replace("set i = (messages|length - 1) - loop.index0", "set i = messages[loop.index0].n"),
    SCAN.replace("messages[::-1]", "messages[::-2]"),
    "{%- macro r(x) %}{{ x ~ suffix }}{%- endmacro %}{%- set suffix = '' %}"
    + SCAN.replace("m.role == 'user'", "r(m.role) == 'user'"),  # a macro reads a name from outside
])
def test_a_scan_the_proof_cannot_vouch_for_walks_whole(scan: str) -> None:
    """A reverse scan outside the proven shape keeps its whole walk (and the prompt is the whole
    render's); the one in the shape is proven."""
    source = "{%- set ns0 = namespace(role='user') %}" + scan.replace("ns.role", "ns0.role") + SCAN_MAIN
    whole, chain = ChatTemplate(source), Chain(ChatTemplate(source))
    plan = chain.template.loop_plan()
    assert plan is not None and plan.scan is None
    messages = [{"role": "user", "content": "q", "n": 0}, *({"role": "tool", "content": f"t{i}", "n": i}
                                                             for i in range(1, 6))]
    for grown in (messages, [*messages, {"role": "tool", "content": "u", "n": 9}]):
        assert chain.render(grown) == whole.render(grown)
    assert chain.state is not None
    proven = ChatTemplate(SCAN + SCAN_MAIN).loop_plan()
    assert proven is not None and proven.scan is not None


def _cut_template(place: str, op: str) -> str:
    """A loop whose iterations read where the last user message is only through ``place op ns.cut``
    (as Qwen3's ``loop.index0 > ns.last_query_index``), that place found by a scan before the loop."""
    return ("{%- set ns = namespace(flag=true, cut=0) -%}"
            "{%- for m in messages[::-1] -%}{%- set index = (messages|length - 1) - loop.index0 -%}"
            "{%- if ns.flag and m.role == 'user' -%}{%- set ns.flag = false -%}{%- set ns.cut = index -%}{%- endif -%}"
            "{%- endfor -%}"
            "{%- for m in messages -%}"
            f"{{%- if {place} {op} ns.cut -%}}<{{{{ m.content }}}}>{{%- else -%}}{{{{ m.content }}}}{{%- endif -%}}"
            "{%- endfor -%}")


@pytest.mark.parametrize("place", ["loop.index0", "loop.index"])
@pytest.mark.parametrize("op", ["<", "<=", ">", ">=", "==", "!="])
def test_a_moved_place_comparison_reruns_only_the_places_between(place: str, op: str,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the captured value a guard compares the iteration's place with moves (a new user
    message), the guards are evaluated only at the places between its two values (and where
    ``loop.last`` moved): every other iteration is taken unevaluated — and every prompt is the
    whole render's, whichever way the comparison is written and however far the value moves."""
    source = _cut_template(place, op)
    whole, resumed = ChatTemplate(source), Chain(ChatTemplate(source))
    evaluated: list[int] = []
    outcomes = resume_guards.Guards.outcomes

    def counted(self: object, values: object, captured: object, indices: object, n: int) -> object:
        evaluated.append(len(indices))  # type: ignore[arg-type]
        return outcomes(self, values, captured, indices, n)  # type: ignore[arg-type]

    monkeypatch.setattr(resume_guards.Guards, "outcomes", counted)
    rng = random.Random(f"{place}{op}")
    messages: list[dict] = [{"role": "user", "content": "u0"}]
    for step in range(80):
        before = max(i for i, m in enumerate(messages) if m["role"] == "user")
        new = [{"role": "assistant", "content": f"a{step}"}]
        if rng.random() < 0.5:
            new.append({"role": "user", "content": f"u{step}"})
        if step == 30:  # a user message far back: the value moves a long way, once
            messages[3] = {**messages[3], "role": "user"}
        elif before > 0 and rng.random() < 0.2:  # the last user message taken back: the value moves back
            messages[before] = {**messages[before], "role": "assistant"}
        messages = [*messages, *new]
        moved = abs(max(i for i, m in enumerate(messages) if m["role"] == "user") - before)
        evaluated.clear()
        assert resumed.render(messages) == whole.render(messages), (step, messages)
        # both renders' guards, at the places the value passed and where the last one was
        assert step == 30 or sum(evaluated) <= 2 * (moved + 3), (step, moved, evaluated)
    assert resumed.reused > 80 * 20


def test_a_bounded_render_continues_and_never_renders_whole() -> None:
    """Under ``bounded(n)`` a render that continues the one before runs its new iterations and gives
    the whole render's prompt; one that would run more than ``n`` bytes of the loop's items — nothing
    to continue, or the user's new message moving Qwen3's last query beyond what its guards allow —
    raises ``RenderTooLarge`` before running any, and so does a render that would fall back to
    rendering whole (the separator in the data)."""
    source = TEMPLATES["data/Qwen-Qwen3-0.6B.jinja"]
    whole, resumed = ChatTemplate(source), Chain(ChatTemplate(source))
    turns = agent_steps(True)[-1]
    for i in range(30):
        call = Call(f"call{i}x000", "bash", json.dumps({"i": i}))
        turns = [*turns, Turn("assistant", f"step {i}", (call,)), Turn("tool", "x" * 1000, tool_call_id=call.id)]
    with bounded(4096), pytest.raises(RenderTooLarge):  # nothing to continue: the whole loop would run
        _render(resumed, turns, None)
    assert resumed.state is None
    _render(resumed, turns, None)  # (unbounded: rendered whole, its state kept)
    call = Call("call99x000", "bash", "{}")
    grown = [*turns, Turn("assistant", "", (call,)), Turn("tool", "done", tool_call_id=call.id)]
    expected = _render(whole, grown, None)
    with bounded(4096):
        assert _render(resumed, grown, None) == expected
    assert resumed.state is not None and len(resumed.state.texts) == len(grown)
    edited = [*grown[:41], Turn("tool", "y" * 1000, tool_call_id=grown[41].tool_call_id), *grown[42:]]
    kept = resumed.state
    with bounded(512), pytest.raises(RenderTooLarge):  # the edited result's iteration alone is 1 KB
        _render(resumed, edited, None)
    resumed.state = kept  # (what was kept is still there: the request that failed left nothing)
    expected = _render(whole, edited, None)
    with bounded(4096):  # it and the iterations around it
        assert _render(resumed, edited, None) == expected
    with bounded(1 << 20):
        separated = [*grown, Turn("user", f"a{SEPARATOR}b")]
        with pytest.raises(RenderTooLarge):
            _render(resumed, separated, None)


def test_an_iteration_reading_from_the_end_is_not_kept() -> None:
    """``messages[loop.index0 - 1]`` in the first iteration is the last message: that render
    depends on the whole conversation and is not kept."""
    source = "{%- for m in messages %}{{ messages[loop.index0 - 1].content }}:{{ m.content }}|{%- endfor %}"
    whole, resumed = ChatTemplate(source), Chain(ChatTemplate(source))
    messages = [{"content": c} for c in "abcd"]
    for n in (2, 3, 4):
        assert resumed.render(messages[:n]) == whole.render(messages[:n])
        assert resumed.state is None
    assert resumed.reused == 0


def test_a_conversations_own_messages_are_known_by_identity(monkeypatch: pytest.MonkeyPatch) -> None:
    """``render_conversation`` hands the template the same message objects for the same turns, and
    the render knows them again without serialising them; the prompt is the whole render's."""
    source = TEMPLATES["data/Qwen-Qwen3-0.6B.jinja"]
    whole, resumed = ChatTemplate(source), Chain(ChatTemplate(source))
    steps = agent_steps(True)
    for turns in steps:
        assert _render(resumed, turns, None) == _render(whole, turns, None)
    profile = TemplateProfile()
    first, again = template_messages(steps[-1], profile), template_messages(steps[-1], profile)
    assert all(a is b for a, b in zip(first, again, strict=True))
    serialisations: list[object] = []
    item_bytes = resumed_render._item_bytes
    monkeypatch.setattr(resumed_render, "_item_bytes", lambda item: serialisations.append(item) or item_bytes(item))
    call = Call("call9z000", "bash", "{}")
    more = [*steps[-1], Turn("assistant", "", (call,)), Turn("tool", "done", tool_call_id=call.id)]
    reused = resumed.reused
    assert _render(resumed, more, None) == _render(whole, more, None)
    assert resumed.reused > reused and len(serialisations) == 2  # only the two new messages serialised


def test_messages_changed_in_place_are_rendered_anew() -> None:
    """A caller that changes its message dicts between renders (and so does not say ``frozen``)
    gets the prompt of what they hold now."""
    source = TEMPLATES["data/Qwen-Qwen2.5-7B-Instruct.jinja"]
    whole, resumed = ChatTemplate(source), Chain(ChatTemplate(source))
    messages = [{"role": "user", "content": f"question {i}"} for i in range(6)]
    assert resumed.render(messages) == whole.render(messages)
    messages[2]["content"] = "changed"
    messages.append({"role": "user", "content": "next"})
    assert resumed.render(messages) == whole.render(messages)
    assert "changed" in resumed.render(messages)


def test_a_turn_changed_after_it_was_shown_gets_a_new_message() -> None:
    turn, call = Turn("user", "first"), Turn("assistant", "", (Call("c1", "bash", "{}"),))
    result = Turn("tool", "out", tool_call_id="c1")
    profile = TemplateProfile()
    shown = template_messages([turn, call, result], profile)
    turn.text = "second"
    again = template_messages([turn, call, result], profile)
    assert again[0]["content"] == "second" and again[0] is not shown[0]
    assert again[2] is shown[2] and again[2]["name"] == "bash"
    renamed = template_messages([turn, Turn("assistant", "", (Call("c1", "grep", "{}"),)), result], profile)
    assert renamed[2]["name"] == "grep"  # a tool result's name follows its call


#: the shaping a derivation can take (``app.templates.prompt``): system text in place, joined first or
#: folded into the first user turn; calls as text; results as user turns; short call ids; no content
DERIVATIONS = {
    "anywhere": (TemplateProfile(), "anywhere"),
    "leading": (TemplateProfile(system="leading", call_content_none=True), "leading"),
    "fold": (TemplateProfile(system="fold", alnum9_ids=True), "fold"),
    "calls as text": (TemplateProfile(renders_calls=False), "anywhere"),
    "results as user turns": (TemplateProfile(renders_results=False), "leading"),
}


def _derivation_step(rng: random.Random, turns: list[Turn], i: int) -> list[Turn]:
    """One random change of a conversation, as clients make them — and the changes that make a
    continued derivation start again: a system turn, a call with an earlier result's id, a removed
    call or result, content parts."""
    op = rng.choice(["append", "append", "append", "trailing", "edit", "remove", "reuse", "parts", "system", "cut",
                     "remade"])
    if op == "append":
        return [*turns, *_campaign_turn(rng, i)]
    if op == "trailing":
        return [*(turns[:-1] if turns[-1].role == "user" else turns), Turn("user", f"reminder {i}")]
    if op == "edit":
        k = rng.randrange(len(turns))
        t = turns[k]
        return [*turns[:k], Turn(t.role, t.text + f" (edited {i})", t.calls, t.reasoning, t.tool_call_id), *turns[k + 1:]]
    if op == "remove" and len(turns) > 3:
        k = rng.randrange(1, len(turns))
        return [*turns[:k], *turns[k + 1:]]
    if op == "reuse":  # a call with the id of a result already in the conversation: that result's name changes
        ids = [t.tool_call_id for t in turns if t.role == "tool" and t.tool_call_id]
        if ids:
            call = Call(rng.choice(ids), f"tool{i}", "{}")
            return [*turns, Turn("assistant", "", (call,)), Turn("tool", f"again {i}", tool_call_id=call.id)]
    if op == "parts":
        return [*turns, Turn("user", f"look {i}", parts=(f"look {i}",))]
    if op == "system":
        return [*turns, Turn("system", f"note {i}")]
    if op == "cut" and len(turns) > 4:
        return turns[:rng.randrange(2, len(turns))]
    if op == "remade":  # an earlier turn made again from the same fields (a request's instructions)
        k = rng.randrange(len(turns))
        t = turns[k]
        return [*turns[:k], Turn(t.role, t.text, t.calls, t.reasoning, t.tool_call_id, t.name, dict(t.extra), t.parts),
                *turns[k + 1:], *_campaign_turn(rng, i)]
    return [*turns, *_campaign_turn(rng, i)]


@pytest.mark.parametrize("shape", DERIVATIONS)
@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_continued_messages_are_the_whole_derivations(shape: str, seed: int) -> None:
    """A conversation's messages made continuing the derivation before (``Derived``: only the
    turns after those it has again) are the messages a whole derivation makes — the same names,
    results, shape — under every kind of change; the continuation is taken where it can be."""
    profile, placement = DERIVATIONS[shape]
    rng = random.Random(seed)
    turns = [Turn("system", "You are a coding agent."), Turn("user", "Fix the failing test.")]
    previous: prompt_module.Derived | None = None
    continued = 0
    for i in range(80):
        turns = _derivation_step(rng, turns, i)
        k = prompt_module._continued(turns, previous) if previous is not None else None
        made = prompt_module._derive(turns, profile, placement, json_call_text, None, True, previous, k)
        whole = prompt_module._derive(turns, profile, placement, json_call_text, None, True, None)
        assert made.messages == whole.messages, (i, k)
        assert (made.names, made.results, made.shift, made.anchor) == (
            whole.names, whole.results, whole.shift, whole.anchor), (i, k)
        continued += k is not None and profile.renders_results
        previous = made
    assert continued > 20 or not profile.renders_results  # (results as user turns are merged: made whole)


def test_a_continued_render_makes_messages_for_new_turns_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """``render_conversation`` continuing a render makes messages only for the turns after those
    the render before had (the same objects): an agent's next turn costs its new turns, not the
    conversation — and the prompt is the whole render's. A system turn among the new ones starts
    again (system text may move)."""
    source = TEMPLATES["data/Qwen-Qwen3-0.6B.jinja"]
    whole, resumed = ChatTemplate(source), Chain(ChatTemplate(source))
    made: list[int] = []
    messages = prompt_module._messages
    monkeypatch.setattr(prompt_module, "_messages", lambda turns, *rest: made.append(len(turns)) or messages(turns, *rest))
    def made_for(turns: list[Turn]) -> int:
        """How many turns the continued render made messages for (its prompt: the whole render's)."""
        prompt = _render(resumed, turns, None)
        count = made[-1]
        assert prompt == _render(whole, turns, None)
        return count

    turns = agent_steps(True)[-1]
    assert made_for(turns) == len(turns)
    call = Call("call9z000", "bash", "{}")
    turns = [*turns, Turn("assistant", "", (call,)), Turn("tool", "done", tool_call_id=call.id)]
    assert made_for(turns) == 2
    turns = [*turns, Turn("user", "reminder")]
    assert made_for(turns) == 1
    turns = [*turns[:-1], Turn("user", "reminder, again"), Turn("assistant", "ok")]  # rewritten: made again
    assert made_for(turns) == 2
    turns = [Turn("system", turns[0].text), *turns[1:], Turn("user", "go on")]  # instructions made again
    assert made_for(turns) == 1
    turns = [*turns, Turn("system", "A new rule.")]
    assert made_for(turns) == len(turns)
    assert resumed.state is not None and isinstance(resumed.state.derived, prompt_module.Derived)
    assert pickle.loads(pickle.dumps(resumed.state)).derived is None  # (a worker's state comes back without it)


def test_a_formats_call_text_is_one_function() -> None:
    """How earlier calls are written is the same function every time it is asked for — in a tool
    format's own wire format too — so a continued render knows its settings again (``Derived.key``)."""
    for tools in ("qwen25", "mistral", None):
        formats = Formats.of(ParserChoice(tools=tools))
        assert formats.call_text() is formats.call_text()
    assert Formats.of(ParserChoice(tools="qwen25")).wire is not None  # (a wire format: the case that made one per call)


def test_a_turn_travels_without_what_was_derived_from_it() -> None:
    turn = Turn("assistant", "hi", (Call("c1", "bash", "{}"),), "why", extra={"prefix": True})
    template_messages([turn], TemplateProfile())
    assert turn.derived is not None
    copied = pickle.loads(pickle.dumps(turn))
    assert copied == turn and copied.derived is None


def test_a_prompt_with_its_encoding_is_written_as_that_encoding() -> None:
    text = 'line "one"\n«é» 日本語 \x00'
    prompt = JsonText(text, orjson.dumps(text))
    body = {"model": "m", "prompt": prompt, "max_tokens": 5}
    pieces = body_pieces(body)
    assert b"".join(pieces) == orjson.dumps({"model": "m", "prompt": text, "max_tokens": 5})
    assert any(piece is prompt.json for piece in pieces)  # written as it is, not copied into the rest
    for shape in ({"prompt": prompt}, {"prompt": prompt, "a": [1]}, {"a": 1, "prompt": prompt}, {"a": 1, "b": "x"}):
        assert b"".join(body_pieces(shape)) == orjson.dumps({k: str(v) if k == "prompt" else v for k, v in shape.items()})
    wrong = JsonText(text, b'"something else"')  # the encoding is taken on trust: it is what is sent
    assert orjson.loads(b"".join(body_pieces({"prompt": wrong})))["prompt"] == "something else"
    assert type(prompt[1:]) is str and type(prompt + "x") is str and type(str(prompt)) is str
    copied = pickle.loads(pickle.dumps(prompt))
    assert copied == text and copied.json == prompt.json


def _plain_messages(with_reasoning: bool) -> list[dict[str, object]]:
    messages: list[dict[str, object]] = [{"role": "system", "content": "You are a coding agent."},
                                         {"role": "user", "content": "Fix the failing test."}]
    for i in range(3):
        call = {"id": f"call{i}", "type": "function", "function": {"name": "bash", "arguments": {"path": f"/r/{i}"}}}
        turn: dict[str, object] = {"role": "assistant", "content": f"Checking {i}.", "tool_calls": [call]}
        if with_reasoning:
            turn["reasoning_content"] = f"step {i}"
        messages += [turn, {"role": "tool", "content": f"out «{i}»", "tool_call_id": f"call{i}"}]
    return messages


@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_the_fast_render_gives_what_jinja_gives(name: str) -> None:
    """``fastrender.render`` (globals merged once per template) against jinja's own ``render`` on
    every suite template: the same text, or the same error."""
    from app.templates import fastrender

    template = ChatTemplate(TEMPLATES[name], "<BOS>", "<EOS>")._template

    def outcome(fast: bool, context: dict[str, object]) -> str:
        try:
            return fastrender.render(template, context) if fast else template.render(**context)
        except Exception as exc:  # noqa: BLE001 - compared, not handled
            return f"{type(exc).__name__}: {exc}"

    for tools in (agent_tools(2, 200), None):
        for with_reasoning in (True, False):
            for extra in ({}, {"enable_thinking": False}):
                context = {"bos_token": "<BOS>", "eos_token": "<EOS>", "tools": tools, "add_generation_prompt": True,
                           "messages": _plain_messages(with_reasoning), **extra}
                expected = outcome(False, context)
                assert outcome(True, context) == expected
                assert outcome(True, context) == expected  # the merged globals, reused


# ------------------------------------------------------------------ a randomized campaign

CAMPAIGN_TEMPLATES = ("Qwen-Qwen3-0.6B.jinja", "Qwen-Qwen2.5-7B-Instruct.jinja", "Qwen3-Coder.jinja",
                      "meta-llama-Llama-3.1-8B-Instruct.jinja", "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja",
                      "deepseek-ai-DeepSeek-V3.1.jinja", "GLM-4.6.jinja", "Mistral-Small-3.2-24B-Instruct-2506.jinja",
                      "Kimi-K2-Instruct.jinja", *SCAN_TEMPLATES[1:])


def _campaign_turn(rng: random.Random, i: int) -> list[Turn]:
    kind = rng.choice(["call", "call", "user", "answer", "system"])
    if kind == "user":  # (a tool result dressed as a user message is not a query: ``resume.scan``)
        return [Turn("user", rng.choice(["go on", f"now {i}", "«é» 日本", "", f"<tool_response>{i}</tool_response>"]))]
    if kind == "answer":
        return [Turn("assistant", f"done {i}", reasoning=rng.choice([None, f"why {i}"]))]
    if kind == "system":
        return [Turn("system", f"note {i}")]
    call = Call(f"c{i}x{rng.randrange(99)}", rng.choice(["bash", "grep"]),
                rng.choice([json.dumps({"n": i, "ok": rng.random() < 0.5, "f": i / 3}), {"path": f"/r/{i}", "k": [i]}]))
    return [Turn("assistant", rng.choice(["", f"checking {i}"]), (call,), rng.choice([None, f"think {i}"])),
            Turn("tool", f"out {i}\nline", tool_call_id=call.id)]


@pytest.mark.parametrize("name", CAMPAIGN_TEMPLATES)
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_edits_render_as_a_whole_render_does(name: str, seed: int) -> None:
    """Sixty steps of one conversation under random changes — turns appended, a trailing user
    message rewritten, an earlier message edited, inserted or removed, the tools and template
    switches changed — each rendered continuing the render before: always the whole render."""
    rng = random.Random(seed)
    path = next((f for f in TEMPLATES if f.endswith("/" + name)), None)
    if path is None:
        pytest.skip(f"{name} is not in the suite")
    whole = ChatTemplate(TEMPLATES[path], "<BOS>", "<EOS>")
    resumed = Chain(ChatTemplate(TEMPLATES[path], "<BOS>", "<EOS>"))
    turns = [Turn("system", "You are a coding agent."), Turn("user", "Fix the failing test.")]
    tools: list[dict] | None = agent_tools(3, 400)
    kwargs: dict[str, object] = {}
    for step in range(60):
        op = rng.choice(["append", "append", "append", "trailing", "edit", "insert", "remove", "tools", "kwargs"])
        if op == "append":
            turns = [*turns, *_campaign_turn(rng, step)]
        elif op == "trailing":
            if turns[-1].role == "user":
                turns = turns[:-1]
            turns = [*turns, Turn("user", f"reminder {step}")]
        elif op == "edit" and len(turns) > 1:
            k = rng.randrange(len(turns))
            t = turns[k]
            turns = [*turns[:k], Turn(t.role, t.text + f" (edited {step})", t.calls, t.reasoning, t.tool_call_id),
                     *turns[k + 1:]]
        elif op == "insert":
            k = rng.randrange(1, len(turns) + 1)
            turns = [*turns[:k], Turn("user", f"inserted {step}"), *turns[k:]]
        elif op == "remove" and len(turns) > 2:
            k = rng.randrange(1, len(turns))
            turns = [*turns[:k], *turns[k + 1:]]
        elif op == "tools":
            tools = rng.choice([None, agent_tools(3, 400), agent_tools(2, 400)])
        elif op == "kwargs":
            kwargs = rng.choice([{}, {"enable_thinking": False}, {"enable_thinking": True}])
        assert _render(resumed, turns, tools, **kwargs) == _render(whole, turns, tools, **kwargs), (step, op)
    assert resumed.reused > 0 or resumed.template.loop_plan() is None
