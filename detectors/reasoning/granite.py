"""IBM Granite reasoning.

Granite 3.3 (``thinking=True``): ``<think>…</think><response>…</response>``.
Granite 3.2: ``Here is my thought process: … Here is my response: …``.
The response wrapper is markup, not content."""

from __future__ import annotations

from detectors.turns import GRANITE
from parsers.declare import ReasoningDetector


class Granite(ReasoningDetector):
    start = ("<think>", "Here is my thought process:")
    end = ("</think>", "Here is my response:")
    content_markup = ("<response>", "</response>")
    end_tokens = GRANITE
