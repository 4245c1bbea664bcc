"""Swiss AI Apertus tool calls: a JSON list of single-key objects, the key being the tool name.

    Let me look that up.<|tools_prefix|>[{"get_weather": {"city": "Bern"}}, {"get_time": {}}]<|tools_suffix|>

Each element is ``{"NAME": {arguments}}``; the arguments stream through as written (a JSON
string holding the object, as the template renders ``arguments|tojson``, is decoded). A single
object without the list brackets is accepted. The closing ``<|tools_suffix|>`` may be missing
where the model itself ended the output (a stop string).
"""

from __future__ import annotations

from detectors.turns import APERTUS
from parsers.declare import JsonCallShape, Opener, ToolCallDetector, json_list

PREFIX, SUFFIX = "<|tools_prefix|>", "<|tools_suffix|>"
SHAPE = JsonCallShape(name_keys=(), args_keys=(), nest_keys=(), name_is_key=True)


class Apertus(ToolCallDetector):
    end_tokens = APERTUS
    format = json_list({PREFIX: Opener(closer=SUFFIX, lone_object=True)}, SHAPE, write=PREFIX)
