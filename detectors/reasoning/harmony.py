"""gpt-oss (Harmony) as a reasoning parser alone: ``analysis`` messages are reasoning, the rest content.

    <|channel|>analysis<|message|>Simple arithmetic.<|end|><|start|>assistant<|channel|>final<|message|>4.

→ reasoning ``Simple arithmetic.``, content ``4.``. It runs the same Harmony program as the
``gpt-oss`` tool parser (``parsers.shapes.harmony``) with tool calls disabled: a call message's body
(``to=functions.NAME``) is passed through as content, as the model wrote it (the client asked for
no tool parsing, and text is never lost); calls to built-in tools are dropped as there.

The start state comes from the prompt's tail (``initial_state``): after ``<|start|>assistant`` the
output begins with a header; a prompt ending in ``<|channel|>analysis<|message|>`` starts inside
reasoning (as does ``force_reasoning``). The tool parser's ``stop_markers`` play no part: Harmony
messages say themselves where they end.

The program is ``HarmonyReasoning``'s (``parsers.reasoning``), for any ``Dialect``.
"""

from __future__ import annotations

from parsers.declare import BEAM, CHANNEL, END, HARMONY, MESSAGE, HarmonyReasoning


class GptOssReasoning(HarmonyReasoning):
    dialect = HARMONY
    start = (CHANNEL + "analysis" + MESSAGE,)
    end = END


class BeamReasoning(GptOssReasoning):
    """Beam's envelope (``detectors.tools.beam``) as a reasoning parser alone: ``analysis`` messages
    are reasoning; a call message's XML body passes through as content, as written."""

    dialect = BEAM
