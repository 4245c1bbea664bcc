"""toolwire's HTTP edge: everything that is not the parsing library.

Rooms:

* ``api/``          — the ASGI app (Starlette), its middleware, and one module per API face (decode a request,
                      encode the parser events);
* ``templates/``    — chat templates: rendering with Hugging Face semantics, and choosing parsers
                      from a template (``auto``);
* ``constraints/``  — constrained decoding: GBNF grammars, JSON schemas, structural tags;
* ``backends/``     — raw-completion backends (vLLM, llama.cpp, generic OpenAI completions) and the
                      streaming HTTP client under them;
* ``local/``        — the embedded default: building llama-server and running it;
* top level         — settings, CLI, process runtime, errors, logs, metrics.
"""
