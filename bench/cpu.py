"""The CPU time a process tree has spent: one measure for every section that reads it from outside.

``tree_cpu(pid, …)`` is the kernel's nanosecond count of time on a CPU (``/proc/…/task/…/schedstat``)
of each process given, every thread of it, and every live descendant (a server's prepare workers, a
replica's uvicorn workers). ``/proc/…/stat``'s user and system times count 10 ms clock ticks: a
request of a few milliseconds, or a round of a dozen of them, would be measured to within a tick or
two — as coarse as the differences a section compares.
"""

from __future__ import annotations

import os


def tree_cpu(*pids: int) -> float:
    """CPU seconds of ``pids`` and every live descendant, every thread of each (see the module
    docstring). A process gone meanwhile counts nothing more; what a descendant that ended had spent
    is no longer counted (its parent's ``stat`` would hold it only once it is reaped)."""
    total = 0
    stack = list(pids)
    while stack:
        current = stack.pop()
        try:
            tasks = os.listdir(f"/proc/{current}/task")
        except (FileNotFoundError, ProcessLookupError):
            continue
        for task in tasks:
            try:
                with open(f"/proc/{current}/task/{task}/schedstat") as f:
                    total += int(f.read().split()[0])
                with open(f"/proc/{current}/task/{task}/children") as f:
                    stack.extend(int(child) for child in f.read().split())
            except (FileNotFoundError, ProcessLookupError):
                continue
    return total / 1e9


__all__ = ["tree_cpu"]
