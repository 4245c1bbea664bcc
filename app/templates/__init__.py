"""Chat templates: loading and rendering them as transformers does (``chat_template``), and learning
which parsers a template's model needs (``autodetect``)."""
