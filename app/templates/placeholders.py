"""The placeholder code: private-use characters that stand in a render for a piece of client text.

The block is ``U+F0000`` … ``U+F001F`` (``RESERVED`` matches any of it; ``holds_reserved`` finds one
in a long text quicker). A placeholder is ``OPEN``,
its code in hexadecimal digits written as ``U+F0010`` … ``U+F001F``, ``CLOSE``; the code names a
slice of a control string by the string's index (``piece_code``), or one of the block's own
characters a client sent (``char_code``). ``PLACEHOLDER`` finds a whole placeholder, ``FROM_DIGITS``
reads its code back. Only the code lives here: hiding client text is ``app.templates.control_tables``,
putting a render back (and refusing a cut placeholder) is ``app.templates.literal``.
"""

from __future__ import annotations

import re

BASE = 0xF0000  # Supplementary Private Use Area-A: our 32 code points
OPEN, CLOSE = chr(BASE), chr(BASE + 1)
_DIGIT0 = BASE + 0x10
RESERVED_CLASS = f"[{OPEN}-{chr(BASE + 0x1F)}]"
PLACEHOLDER = re.compile(f"{OPEN}([{chr(_DIGIT0)}-{chr(_DIGIT0 + 15)}]+){CLOSE}")
RESERVED = re.compile(RESERVED_CLASS)
_LEAD, _FIRST, _LAST = OPEN.encode()[:3], OPEN.encode()[3:], chr(BASE + 0x1F).encode()[3:]
assert chr(BASE + 0x1F).encode()[:3] == _LEAD  # the block shares its first three UTF-8 bytes
#: ``RESERVED`` in UTF-8: a literal lead the engine skips ahead to, then one byte of a range
_RESERVED_UTF8 = re.compile(re.escape(_LEAD) + b"[" + re.escape(_FIRST) + b"-" + re.escape(_LAST) + b"]")


def holds_reserved(text: str) -> bool:
    """Whether ``text`` holds a character of the block (``RESERVED.search``), searched in its UTF-8
    bytes: the character class over a long non-ASCII text costs several times encoding it and
    looking for the block's lead byte (a 0.9 MB conversation: 4.9 ms against ~1; lone surrogates
    encode apart from it). An ASCII text holds none."""
    if text.isascii():
        return False
    data = text.encode("utf-8", "surrogatepass")
    return _LEAD[:1] in data and _RESERVED_UTF8.search(data) is not None  # (one byte: ``memchr``)
_TO_DIGITS = str.maketrans({c: chr(_DIGIT0 + int(c, 16)) for c in "0123456789abcdef"})
FROM_DIGITS = str.maketrans({chr(_DIGIT0 + i): "0123456789abcdef"[i] for i in range(16)})
FIELD = 10  # bits per slice bound in a placeholder's code (control strings up to 1023 characters)


def placeholder(code: int) -> str:
    return OPEN + format(code, "x").translate(_TO_DIGITS) + CLOSE


def piece_code(index: int, start: int, end: int) -> int:
    return ((index << FIELD | start) << FIELD | end) << 1


def char_code(char: str) -> int:
    return (ord(char) - BASE) << 1 | 1
