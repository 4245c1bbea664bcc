"""Kimi (K1.5 / Kimi-VL thinking) reasoning: ``◁think▷ … ◁/think▷``."""

from __future__ import annotations

from parsers.reasoning import ReasoningDetector


class Kimi(ReasoningDetector):
    start = ("◁think▷",)
    end = "◁/think▷"
