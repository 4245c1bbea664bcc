"""``--sched-slice-us``: the event loop thread gets the slice it asked for, and nothing else about
its scheduling changes."""

from __future__ import annotations

import os
import re
import threading
from pathlib import Path

import pytest

from app.sched import set_slice
from tests.conftest import QWEN3_TEMPLATE
from tests.proxy_server import ProxyServer


def slice_ns(tid: int) -> int | None:
    """The thread's current slice from /proc (``se.slice``; Linux ≥ 6.6), or None if not shown."""
    path = Path(f"/proc/self/task/{tid}/sched")
    if not path.exists():
        return None
    match = re.search(r"^se\.slice\s*:\s*(\d+)", path.read_text(), re.MULTILINE)
    return int(match.group(1)) if match else None


def in_thread(fn):  # type: ignore[no-untyped-def]
    """Run ``fn(tid)`` in a fresh thread (so the test process's own threads keep their slice)."""
    result: list[object] = []
    thread = threading.Thread(target=lambda: result.append(fn(threading.get_native_id())))
    thread.start()
    thread.join()
    return result[0]


needs_slices = pytest.mark.skipif(slice_ns(threading.get_native_id()) is None,
                                  reason="no se.slice in /proc on this kernel")


@needs_slices
def test_set_slice_changes_only_the_slice_of_the_calling_thread() -> None:
    def work(tid: int) -> tuple[str | None, int | None, int, int | None]:
        os.setpriority(os.PRIO_PROCESS, tid, 5)  # a niced thread stays niced
        problem = set_slice(300)
        return problem, slice_ns(tid), os.getpriority(os.PRIO_PROCESS, tid), slice_ns(threading.main_thread().native_id)

    before = slice_ns(threading.main_thread().native_id)
    problem, got, nice, main_after = in_thread(work)
    if problem is not None and "Linux ≥ 6.12" in problem:
        pytest.skip(problem)
    assert problem is None
    assert got == 300_000 and nice == 5 and main_after == before


def test_out_of_range_slices_are_refused_with_a_reason() -> None:
    assert "100–100000" in (set_slice(50) or "")
    assert "100–100000" in (set_slice(200_000) or "")


@needs_slices
def test_the_served_app_runs_its_event_loop_with_the_configured_slice() -> None:
    proxy = ProxyServer(backend="http://127.0.0.1:9", backend_type="vllm", chat_template=str(QWEN3_TEMPLATE),
                        sched_slice_us=250).start()
    try:
        assert proxy.thread.native_id is not None
        assert slice_ns(proxy.thread.native_id) == 250_000
    finally:
        proxy.stop()


def test_the_setting_is_validated() -> None:
    from pydantic import ValidationError

    from app.settings import Settings

    with pytest.raises(ValidationError):
        Settings(sched_slice_us=10)
