"""An interrupted first build of llama-server leaves its ``llama-build-*`` folder in the cache; a later
run removes it, a run that finds another one building waits for it and says so (with the builder's
pid), and no run removes the folder of a build that is still alive.

The build runs the real entry point (``python -m app.local.artifacts llama-server``) in subprocesses,
against a cache in a tmp dir (never the real one), through the seams the code already has: the
package index comes from ``PIP_INDEX_URL`` (a loopback server serving a tiny sdist, which can hold the
download back so a run can be caught mid-build) and ``cmake`` / ``c++`` from ``PATH`` (shims: the
"build" writes a stand-in binary).
"""

from __future__ import annotations

import fcntl
import hashlib
import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from app.local import artifacts

ROOT = Path(__file__).resolve().parent.parent
SDIST = f"llama_cpp_python-{artifacts.LLAMA_CPP_PYTHON_VERSION}.tar.gz"
FAKE_CMAKE = """#!/bin/sh
# configure: nothing to do; build: write the "binary" where the real build puts it
if [ "$1" = "--build" ]; then
  mkdir -p "$2/bin" && printf '#!/bin/sh\\necho stand-in\\n' > "$2/bin/llama-server" && chmod +x "$2/bin/llama-server"
fi
"""


def _sdist() -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        data = b"project(stand_in CXX)\n"
        member = tarfile.TarInfo(f"llama_cpp_python-{artifacts.LLAMA_CPP_PYTHON_VERSION}/vendor/llama.cpp/CMakeLists.txt")
        member.size = len(data)
        archive.addfile(member, io.BytesIO(data))
    return buffer.getvalue()


class Index:
    """A loopback package index serving one sdist; its download waits until ``release()``."""

    def __init__(self) -> None:
        self.sdist = _sdist()
        self.released = threading.Event()
        self.downloads = 0
        self.arrived = threading.Condition()
        index = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                if self.path.startswith("/simple/llama-cpp-python"):
                    body = json.dumps({"files": [{
                        "filename": SDIST, "url": f"http://127.0.0.1:{index.port}/files/{SDIST}",
                        "size": len(index.sdist), "hashes": {"sha256": hashlib.sha256(index.sdist).hexdigest()},
                    }]}).encode()
                elif self.path == f"/files/{SDIST}":
                    with index.arrived:
                        index.downloads += 1
                        index.arrived.notify_all()
                    index.released.wait(60)
                    body = index.sdist
                else:
                    self.send_error(404)
                    return
                try:
                    self.send_response(200)
                    self.send_header("content-length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:
                    pass  # the run that asked was killed meanwhile

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def wait_for_download(self, count: int) -> None:
        with self.arrived:
            assert self.arrived.wait_for(lambda: self.downloads >= count, timeout=60), "no download request came"

    def release(self) -> None:
        self.released.set()

    def close(self) -> None:
        self.released.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def index() -> Iterator[Index]:
    served = Index()
    yield served
    served.close()


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("TOOLWIRE_CACHE", str(root))  # never the real cache: a real build may be running there
    return root


def _wait(condition: Callable[[], bool], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _build_folders(cache: Path) -> set[str]:
    return {p.name for p in cache.glob("llama-build-*")}


def test_a_later_run_removes_what_an_interrupted_build_left(cache: Path, index: Index, tmp_path: Path) -> None:
    shims = tmp_path / "bin"
    shims.mkdir()
    for name, text in (("cmake", FAKE_CMAKE), ("c++", "#!/bin/sh\nexit 0\n")):
        (shims / name).write_text(text)
        (shims / name).chmod(0o755)
    env = {**os.environ, "TOOLWIRE_CACHE": str(cache), "PIP_INDEX_URL": f"http://127.0.0.1:{index.port}/simple",
           "PATH": f"{shims}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}"}
    runs: list[subprocess.Popen[str]] = []

    def start(name: str) -> tuple[subprocess.Popen[str], Path]:
        log = tmp_path / f"{name}.log"
        with open(log, "w") as err:
            run = subprocess.Popen([sys.executable, "-m", "app.local.artifacts", "llama-server"], cwd=ROOT, env=env,
                                   stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err, text=True)
        runs.append(run)
        return run, log

    try:
        # 1. the first build is killed mid-way, as a CI timeout does: its folder stays behind
        first, _ = start("first")
        index.wait_for_download(1)
        left = _build_folders(cache)
        assert len(left) == 1
        first.send_signal(signal.SIGTERM)
        first.wait(30)
        assert _build_folders(cache) == left

        # 2. the next run removes it before it starts its own build
        second, second_log = start("second")
        index.wait_for_download(2)
        live = _build_folders(cache)
        assert len(live) == 1 and not live & left, (live, left, second_log.read_text())
        assert "removed 1 folder(s) an interrupted llama-server run left" in second_log.read_text()

        # 3. a third run, started while the second builds, waits and says for whom; the live folder stays
        third, third_log = start("third")
        _wait(lambda: "waiting for another" in third_log.read_text(), "the third run to say it waits")
        assert f"waiting for another llama-server run to finish (pid {second.pid};" in third_log.read_text()
        time.sleep(0.3)
        assert _build_folders(cache) == live and third.poll() is None

        # 4. the second build finishes; the third finds its binary; nothing is left behind
        index.release()
        for run in (second, third):
            out, _ = run.communicate(timeout=60)
            assert run.returncode == 0 and out.strip() == str(artifacts.llama_server_cached())
        assert artifacts.llama_server_cached().read_text().startswith("#!/bin/sh")
        assert _build_folders(cache) == set()
        assert index.downloads == 2  # the third run did not build again
    finally:
        index.release()
        for run in runs:
            if run.poll() is None:
                run.kill()
                run.wait(10)


def test_a_built_cache_is_swept_only_when_no_run_holds_the_lock(cache: Path) -> None:
    target = artifacts.llama_server_cached()
    target.parent.mkdir(parents=True)
    target.write_text("#!/bin/sh\n")
    leftovers = [cache / "llama-build-abc123", cache / "llama-build-def456"]
    for folder in leftovers:
        (folder / "build").mkdir(parents=True)
        (folder / "build" / "CMakeCache.txt").write_text("x" * 1000)
    unrelated = [cache / "caddy-2.11.7.tmp", cache / "npm", cache / "model-fetch-notes.txt"]
    unrelated[0].mkdir()
    unrelated[1].mkdir()
    unrelated[2].write_text("a file, not a scratch folder")

    with open(cache / ".llama-server.lock", "a+") as holder:  # a live build elsewhere holds the lock
        fcntl.flock(holder, fcntl.LOCK_EX)
        assert artifacts.ensure_llama_server() == target
        assert all(folder.exists() for folder in leftovers)  # maybe that build's own: left alone
        fcntl.flock(holder, fcntl.LOCK_UN)

    assert artifacts.ensure_llama_server() == target
    assert not any(folder.exists() for folder in leftovers)
    assert all(path.exists() for path in unrelated)
