"""NVIDIA Nemotron Nano v2 tool calls: one JSON list of calls between ``<TOOLCALL>`` tags, as its
chat template writes them (and as Llama-Nemotron models write them: vLLM's ``llama_nemotron_json``).

    Let me check.
    <TOOLCALL>[{"name": "get_weather", "arguments": {"city": "Paris"}}, {"name": "f", "arguments": {}}]</TOOLCALL>
"""

from __future__ import annotations

from detectors.turns import NEMOTRON_NANO2
from parsers.declare import Opener, ToolCallDetector, json_list

TOOLCALL = "<TOOLCALL>"


class NemotronNanoV2(ToolCallDetector):
    format = json_list({TOOLCALL: Opener(closer="</TOOLCALL>", lone_object=True)}, write=TOOLCALL)
    end_tokens = NEMOTRON_NANO2
