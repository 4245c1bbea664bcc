"""ByteDance Seed-OSS reasoning: ``<seed:think> … </seed:think>``."""

from __future__ import annotations

from detectors.turns import SEED_OSS
from parsers.declare import ReasoningDetector


class SeedOss(ReasoningDetector):
    start = ("<seed:think>",)
    end = "</seed:think>"
    end_tokens = SEED_OSS
