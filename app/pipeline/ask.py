"""What every API face decodes its request into (see ``app.pipeline``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from app.backends.generation import Sampling
from app.conversation import Turn
from parsers.tools import ToolSpec

if TYPE_CHECKING:
    from app.prefix import Note

ToolChoice = Literal["none", "auto", "required"]
V = TypeVar("V")


@dataclass(frozen=True, slots=True)
class Tool:
    """A tool offered to the model: ``spec`` is what the parsers and the constraint builders read;
    ``shown`` is what the chat template is given — OpenAI's function-tool shape
    (``{"type": "function", "function": {...}}``, as the client wrote it when it wrote that shape),
    the one shape chat templates know."""

    spec: ToolSpec
    shown: dict[str, Any]
    #: what ``once`` worked out from this tool, by name
    _once: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def once(self, what: str, make: Callable[[Tool], V]) -> V:
        """``make(self)``, worked out the first time ``what`` is asked of this tool and kept with it
        (a tool is read-only: its parts never change). A face hands an agent's next request the
        same tools (``app.prefix``), so its schema's check key and its JSON are worked out once."""
        try:
            value: V = self._once[what]
        except KeyError:
            value = self._once[what] = make(self)
        return value

    @classmethod
    def function(cls, name: str, parameters: Any, description: str | None = None, strict: bool = False,
                 shown: dict[str, Any] | None = None) -> Tool:
        """A function tool (``shown`` defaults to OpenAI's shape of it)."""
        if shown is None:
            function: dict[str, Any] = {"name": name}
            if description is not None:
                function["description"] = description
            function["parameters"] = parameters
            shown = {"type": "function", "function": function}
        return cls(ToolSpec(name, parameters if isinstance(parameters, dict) else {}, description, strict), shown)


@dataclass
class Ask:
    """One generation request, whichever API it came through.

    ``tools`` are the tools offered (``Tool``); ``tool_choice`` is ``None`` when the client did not say (``auto`` with tools, ``none`` without);
    ``named_tool`` forces one tool by name. ``response_format`` is Chat Completions' shape
    (``{"type": "json_schema", "json_schema": {"schema": …}}``). ``template_kwargs`` reach the chat
    template (``enable_thinking``, ``reasoning_effort``, …). ``hold_tool_calls`` ``None`` means the
    server's setting. ``thinking`` turns reasoning on or off through whichever switch the template
    reads (``None``: the template's default; explicit ``template_kwargs`` win); ``thinking_budget``
    caps the reasoning block's tokens where the backend can enforce it. ``top_logprobs`` ``None``
    means no logprobs; a number asks for each content token's logprob and that many alternatives.
    ``n`` answers are generated from the one prompt, each parsed on its own. ``continue_final``: the
    conversation ends with an assistant message the answer continues (Anthropic's prefill, vLLM's
    ``continue_final_message``) — the model is asked to go on from its text, the parsers start in
    the state it leaves them in, and the answer is only what comes after it. ``format_param`` is the
    response format's schema as the face spells its place (``text.format.schema`` on Responses).
    """

    turns: list[Turn]
    tools: list[Tool] = field(default_factory=list)
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
    continue_final: bool = False
    #: where the face's request holds the response format's schema (errors name it)
    format_param: str = "response_format.json_schema.schema"
    #: what the prefix service (``app.prefix``) found and made for this request: how many first
    #: turns were decoded (and checked) for an earlier request of the same conversation, the render
    #: to continue, what to keep once planned (``None``: nothing — never pickled to a worker)
    prefix: Note | None = None
    #: each of its schemas as its check is keyed, once worked out (``app.pipeline.validate.schema_texts``)
    schema_texts: list[tuple[bytes, bytes] | None] | None = field(default=None, repr=False, compare=False)

    @property
    def reused(self) -> int:
        """How many turns were decoded and checked for an earlier request (``prefix``): their
        handed-back calls passed ``check_ask`` then, and they do not make the request heavy
        (``offload.weight``)."""
        return self.prefix.reused if self.prefix is not None else 0

    def fresh_turns(self) -> Iterator[int]:
        """The indices of the turns decoded for this request (not ``reused``), in order."""
        if self.prefix is None:
            yield from range(len(self.turns))
            return
        for begin, stop in self.prefix.fresh:
            yield from range(begin, min(stop, len(self.turns)))
