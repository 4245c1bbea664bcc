"""Rendering the next turn of a conversation without rendering its earlier turns again — where the
template is proven to allow it.

A chat template renders a conversation in one loop over its messages (``{% for message in messages
%}``), with some work before it (the system header, tools) and after it (the generation prompt).
When an agent sends turn *t + 1*, its messages are turn *t*'s plus a few new ones; re-running the
loop body for every earlier message is most of the cost of a long conversation. This package skips
those iterations and splices in their text from the last render — only when that text is certain
to be what the iterations would write now.

**The proof (static, per template; ``plan_of``).** The main loop is a ``for`` over a name (the
*sequence*), at the top level (inside ``if``s at most, so it runs at most once per render), without
a filter, ``else`` or ``recursive``. Its body (and every macro it calls, transitively) must be
free of loop-carried state: no namespace attribute is assigned (``{% set ns.x = … %}``), no method
that changes a list, dict or set is called, no ``{% break %}``; it calls only macros of the
template (each defined once, at the top level, reading no name that is assigned anywhere but once,
at the top level, before the macro), the pure globals ``range``, ``dict``, ``namespace`` and
``raise_exception``, and methods that change nothing; no filter but the pure ones (not
``random``); no ``{% include %}``, ``{% import %}``, ``{% extends %}`` or ``{% block %}``
anywhere. It reads the sequence only as ``seq[loop.index0 ± k]``, ``seq[loop.index ± k]`` or
``seq[k]``, and the main loop's ``loop`` only as ``index0``, ``index``, ``first``, ``last``,
``previtem`` and ``nextitem`` (never ``length``, ``revindex``, ``changed`` or ``cycle``). Every
other name it reads — top-level variables, namespaces, ``tools``, ``chat_template_kwargs`` — is
*captured*: its value is taken when the loop starts. Since nothing in the loop can change outer
state, the text of iteration *i* is then a function of the captured values, *i*, and the items
from *i − k* to *i + ahead* (whether they exist included).

**The check (at run time, per render).** The template is compiled a second time with calls added
just before the loop (it receives the sequence and the captured values) and after it, and with
the loop running only over the iterations not taken from the render before — an appended turn
runs the new ones alone, an edited early message the few around it, never a pass over the rest —
its body rewritten to read ``loop`` and the items around it as a loop over the whole sequence would
(``_Sparse``: each running iteration's place, and whether its neighbours run next to it; a read that
counts from the end — ``seq[loop.index0 - 1]`` in the first iteration — makes the render one that
is not kept). The render is given the state an earlier render of the same conversation left
(``Resume.previous``, ``RenderState``: the prefix service, ``app.prefix``, keeps it). The first call serialises each item of the sequence
exactly (``marshal``, else ``exact_bytes``: an item that cannot be serialised exactly — a tuple,
a ``str`` or ``dict`` subclass other than tool arguments, a non-finite float — stops reuse; the
caller's own message objects, promised unchanged, are known again by identity) and compares them
with the earlier render's, place by place. Iteration *i* is taken from the earlier render when the
items it reads — from *i − behind* to *i + ahead*, and the fixed ones — are the same at the same
places (or absent from both), and the captured values are byte-identical; where captured values
differ, when each differing one is read only through *guards* — expressions of the captured
values and of the iteration's place alone, such as Qwen3's ``loop.index0 > ns.last_query_index``
(``Guards``) — the guards are evaluated for both renders, iteration by iteration, and an
iteration whose guards come out the same is still taken; where every guard either reads no
changed value or compares the iteration's place with an integer of them, only the iterations
between the two integers are evaluated (a new user message moves Qwen3's last query on: a few
iterations, not every one). So an appended turn, a rewritten last
message and an edited early one each re-render only the iterations around what changed.
Everything before and after the loop runs as usual (but a reverse scan, below). Each iteration's
text is cut out of the output by a per-process random separator; if the data itself holds the
separator, the counts do not match and the template is rendered whole.

A template that fails the proof (many do: loops that set namespace flags, Kimi K2's list building)
is always rendered whole. What a render leaves (``RenderState``, in ``Resume.state``): the text of
each loop iteration and its JSON encoding, the sequence's items and the captured values serialised
(and the values, for replaying guards) — the prefix service keeps it, within its byte budget.

Before the loop, Qwen3's template and those built on it walk the whole conversation backwards for
the last user query; where that walk is proven to stop mattering at its first find, a continued
render runs it over the new and changed places and the last find's own only (``scan``).

Its parts, each with one job: ``proof`` (``plan_of``: the static proof, and the template it
compiles), ``scan`` (the reverse walk before the loop, proven and run where it can answer
differently), ``guards`` (the expressions through which the loop reads captured values), ``exact``
(serialising values so that equal bytes mean equal renders), ``render`` (``render_resumable``: the
check and the continued render at run time) and ``purity`` (the Jinja that the proof and the guards
count as changing nothing).
"""

from app.templates.resume.exact import same_places
from app.templates.resume.proof import LoopPlan, NotProven, plan_of
from app.templates.resume.render import (
    SEPARATOR,
    RenderState,
    RenderTooLarge,
    Resume,
    bounded,
    render_bound,
    render_resumable,
)

__all__ = ["SEPARATOR", "LoopPlan", "NotProven", "RenderState", "RenderTooLarge", "Resume", "bounded", "plan_of",
           "render_bound", "render_resumable", "same_places"]
