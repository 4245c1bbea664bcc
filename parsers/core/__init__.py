"""The streaming core every detector is built on: marker scanning with holdback (``markers``),
the input cursor and its primitives (``cursor``), JSON value streaming (``jsonscan``,
``jsoncall``), output channels and calls (``channels``, ``program``), and reusable programs
(``programs``)."""
