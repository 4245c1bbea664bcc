"""``--sched-slice-us``: ask the Linux scheduler (EEVDF, Linux ≥ 6.12) for a shorter time slice.

Why: a task that wakes gets a fresh slice (~1.4 ms by default on 2 CPUs) during which a task it
wakes in turn may not preempt it. When toolwire wakes for the backend's first token, writes the
first chunk and goes on parsing the tokens behind it, the client it just woke waits for that slice
to run out if every CPU is busy — ~1 ms added to time to first token in ``make bench`` (client,
toolwire and a backend streaming as fast as it can on 2 CPUs). With a 100 µs slice that wait all
but goes; the cost is more context switches under load. It only matters when toolwire shares CPUs
with latency-sensitive processes; the default leaves the kernel's slice alone.

The slice is set on the calling thread (the event loop's), via ``sched_getattr`` /
``sched_setattr``; nothing else about the thread's scheduling changes.
"""

from __future__ import annotations

import ctypes
import os
import platform
import struct

# syscall numbers: (sched_setattr, sched_getattr)
SYSCALLS = {"x86_64": (314, 315), "aarch64": (274, 275)}
# struct sched_attr, first version: size, policy, flags, nice, priority, runtime, deadline, period,
# util_min, util_max — ``runtime`` is the slice in ns for SCHED_OTHER
SCHED_ATTR = struct.Struct("=IIQiIQQQII")
RUNTIME_FIELD = 5
SLICE_RANGE_US = (100, 100_000)  # what the kernel accepts


def set_slice(microseconds: int) -> str | None:
    """Set the calling thread's slice. Returns ``None`` on success, else why it could not be set."""
    low, high = SLICE_RANGE_US
    if not low <= microseconds <= high:
        return f"slice must be {low}–{high} µs"
    calls = SYSCALLS.get(platform.machine())
    if calls is None or not hasattr(os, "sched_getaffinity"):
        return f"not supported on {platform.system()} {platform.machine()}"
    setattr_nr, getattr_nr = calls
    libc = ctypes.CDLL(None, use_errno=True)
    buf = ctypes.create_string_buffer(SCHED_ATTR.size)
    if libc.syscall(getattr_nr, 0, buf, SCHED_ATTR.size, 0) != 0:
        return f"sched_getattr failed: {os.strerror(ctypes.get_errno())}"
    fields = list(SCHED_ATTR.unpack(buf.raw))
    if fields[1] != 0:  # not SCHED_OTHER: slices do not apply
        return f"the thread's policy is {fields[1]}, not SCHED_OTHER"
    fields[0] = SCHED_ATTR.size
    fields[RUNTIME_FIELD] = microseconds * 1000
    buf = ctypes.create_string_buffer(SCHED_ATTR.pack(*fields))
    if libc.syscall(setattr_nr, 0, buf, 0) != 0:
        return f"sched_setattr failed: {os.strerror(ctypes.get_errno())} (custom slices need Linux ≥ 6.12)"
    return None
