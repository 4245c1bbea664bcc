"""Muse Glimmer as a reasoning parser alone: ``to=self`` messages are reasoning, the rest content.

     to=self<|message|>Simple arithmetic.<|eom|><|start|>assistant to=user<|message|>4.<|eot|>

→ reasoning ``Simple arithmetic.``, content ``4.``. The Muse message loop of the ``muse`` tool
parser with tool calls off: a tool message's body is content, as written.
"""

from __future__ import annotations

from parsers.declare import EOM, MESSAGE, MUSE, HarmonyReasoning


class Muse(HarmonyReasoning):
    dialect = MUSE
    start = ("to=self" + MESSAGE,)
    end = EOM
    answer_header = " to=user"
