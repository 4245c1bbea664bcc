"""Model formats: one small module per format, reasoning (``detectors.reasoning``) and tool calls
(``detectors.tools``). Each is mostly a declaration — a tool-call detector declares one
``ToolFormat`` — and imports everything it uses from ``parsers.declare``."""
