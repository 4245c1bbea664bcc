"""Model formats: one small module per format, reasoning (``detectors.reasoning``) and tool calls
(``detectors.tools``). Each is mostly a declaration on the shared core in ``parsers.core``."""
