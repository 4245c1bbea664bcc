"""``/metrics`` is the server's, whichever worker answers the scrape: a real ``toolwire serve
--workers 2`` (uvicorn's worker processes, each taking connections off one socket as they come)."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from tests.conftest import QWEN3_TEMPLATE
from tests.proxy_server import free_port
from tests.scripted_backend import Script, ScriptedBackend

CHATS = 'toolwire_requests_total{endpoint="/v1/chat/completions",status="200"}'


def served_chats(url: str) -> float:
    """The chat count one scrape reports (a new connection each time: any worker may answer)."""
    with httpx.Client(timeout=10) as client:
        text = client.get(url + "/metrics").text
    found = re.search(rf"^{re.escape(CHATS)} (\S+)$", text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


def test_metrics_add_up_every_worker(backend_factory: Callable[..., ScriptedBackend], tmp_path: Path) -> None:
    """Each chat is counted once, by the worker that served it, and every scrape — whichever worker
    takes it — reports all of them: the counts never go down from one scrape to the next (one
    worker's own counts would jump between its figure and the other's) and end at the total."""
    backend = backend_factory("vllm", model="Qwen/Qwen3-8B")
    backend.responder = lambda body: Script(pieces=["ok"])
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    process = subprocess.Popen([sys.executable, "-m", "app.cli", "serve", "--backend", backend.url, "--port",
                                str(port), "--chat-template", str(QWEN3_TEMPLATE), "--workers", "2",
                                "--state-dir", str(tmp_path), "--prepare-workers", "1"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 90
        ready = 0
        while ready < 6:  # both workers up: several readiness answers in a row
            try:
                ready = ready + 1 if httpx.get(url + "/readyz", timeout=2).status_code == 200 else 0
            except httpx.HTTPError:
                ready = 0
            assert time.monotonic() < deadline and process.poll() is None, "the server did not start"
            time.sleep(0.05)
        seen: list[float] = []
        for i in range(1, 21):
            with httpx.Client(timeout=30) as client:  # a connection of its own: whichever worker accepts it
                answer = client.post(url + "/v1/chat/completions",
                                     json={"model": "m", "messages": [{"role": "user", "content": f"hi {i}"}]})
            assert answer.status_code == 200
            seen.append(served_chats(url))
            assert seen[-1] <= i, seen
        assert seen == sorted(seen), seen  # never down: every scrape is the sum
        deadline = time.monotonic() + 10  # the last request is counted as its response ends
        while served_chats(url) != 20:
            assert time.monotonic() < deadline, served_chats(url)
            time.sleep(0.05)
        assert [served_chats(url) for _ in range(10)] == [20.0] * 10
    finally:
        process.terminate()
        process.wait(30)
