"""The C allocator's thresholds for a process that serves (glibc's ``mallopt``, a public API).

A request's large strings and bytes — a body of a megabyte, the prompt rendered from it, its JSON
for the backend — are each allocated and freed once per request. With glibc's defaults such a block
is mapped fresh from the kernel (past ``M_MMAP_THRESHOLD``, which starts at 128 KiB and grows only
as far as blocks freed) or the heap's top is handed back once 128 KiB+ lie free
(``M_TRIM_THRESHOLD``): either way the next request touches new pages, and each page costs a fault.
Measured on an agent's turn with a 1.2 MB conversation (2026-11-29, the bench's reads shape, in the
server's own process): ~850 minor faults a turn and 6.2 ms of CPU with the defaults; ~90 and
5.0–5.3 ms with blocks under 8 MiB taken from the heap and up to 16 MiB of freed heap kept. The
price: up to 16 MiB more resident per process than it is using, once it has used it.

An operator's own ``MALLOC_MMAP_THRESHOLD_`` / ``MALLOC_TRIM_THRESHOLD_`` (glibc's environment
tunables) win: then nothing is changed. Other C libraries (musl, macOS): nothing to change.
"""

from __future__ import annotations

import ctypes
import os

#: ``mallopt`` parameters (glibc's ``malloc.h``)
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
#: blocks smaller than this come from the heap (reused), not fresh mappings
MMAP_THRESHOLD = 8 << 20
#: freed heap kept before its top is handed back to the kernel
TRIM_THRESHOLD = 16 << 20
#: the environment tunables an operator sets glibc's thresholds with
TUNABLES = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")


def tune() -> bool:
    """Set the thresholds (see the module docstring) in this process; whether they were set (not:
    another C library, or the operator's own tunables)."""
    if any(name in os.environ for name in TUNABLES):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt  # the C library the interpreter runs on
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))


__all__ = ["MMAP_THRESHOLD", "TRIM_THRESHOLD", "TUNABLES", "tune"]
