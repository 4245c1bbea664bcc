"""The streaming primitives every format is built on — and nothing format-specific.

* ``markers`` — ``MarkerSet``: finding literal markers in streamed text, with holdback;
* ``jsonscan`` — ``JsonValueScan``: where one JSON value ends (string / escape / depth);
* ``cursor`` — ``Cursor``: the input buffer and the primitives programs are written in (``until``,
  ``read_until``, ``match``, ``json_value`` …), linear time and split invariant by contract;
* ``channels`` — ``TextChannel``: content and reasoning text, whitespace trimmed at marker edges,
  a format's envelope markup dropped;
* ``trailing`` — ``TrailingTokens``: end-of-turn tokens that close the output, dropped;
* ``args`` — ``ArgsObject``: a call's arguments object written as JSON from non-JSON text, values
  typed by the tool's schema;
* ``driver`` — ``Out`` / ``CallWriter`` (where a program writes events) and ``Driver`` (resumes a
  program per fed chunk; contains its failures).

The shapes of tool-call formats built from these live in ``parsers.shapes``; a detector author
imports both through ``parsers.declare``.
"""
