"""The one pipeline every API face shares.

A face (``app.api.chat``, ``…responses``, ``…messages``) decodes its request into an ``Ask``
(``ask``): the conversation, tools, tool choice, output constraints, sampling. ``plan`` resolves it
once — prompt, parsers and their start state, wire format, marker tokens, constraint — into a
``Plan`` that the constraint builder, the parsers and the backend all read. ``run`` opens the
backend stream and turns its text into parser events, ending with one ``Finished``. The face
encodes those events (``stream.EventStream`` carries them as SSE) and nothing else: rendering,
constraints, the backend call, parsing, limits and disconnect handling exist once, here.
"""
