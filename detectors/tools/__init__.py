"""Tool-call formats: each module declares ``ToolCallDetector`` classes whose ``format`` (a
``parsers.format.ToolFormat``) says how the format is read and written; the registry
(``parsers.registry``) names them."""
