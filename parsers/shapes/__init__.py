"""Tool-call format *shapes*: how calls are laid out in the text, each as reusable readers and a
builder that declares a whole format (a ``parsers.format.ToolFormat``: program, markers, start
markers and wire, all derived from one spelling).

* ``sections`` — content, then calls after start markers, optionally inside sections
  (``marker_calls``, ``calls_format``);
* ``jsoncall`` — JSON call objects (``json_call`` …; ``tagged_json``);
* ``namedcall`` — a name between markers, then a JSON arguments object (``named_json``);
* ``xmlcall`` — XML-style parameters converted to JSON as they stream (``tagged_xml``, ``wrapped_xml``);
* ``listcalls`` — a JSON list of call objects after an opener, or bare (``json_list``);
* ``pythonic`` — Python call syntax converted to JSON (``python_call_list`` …);
* ``objnotation`` — Google's object notation (``object_notation``);
* ``harmony`` — Harmony-like message envelopes (``harmony``);
* ``generic`` — formats learned from a chat template (``generic``).

Shapes use only ``parsers.core`` primitives, ``parsers.format`` and ``parsers.wire``.
"""
