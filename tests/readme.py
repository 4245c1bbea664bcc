"""The README's shell recipes, for the tests that run them as a reader would.

A recipe is a ```sh block of a README section. ``script`` makes it runnable against a test's
toolwire: the ``toolwire serve`` line is dropped (the test starts its own toolwire), the address
``http://127.0.0.1:8000`` becomes the test's, and the placeholder task ``"…"`` becomes ``"$TASK"``.
Nothing else changes, so a recipe that goes wrong for a reader goes wrong in the test.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
from pathlib import Path

README = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
ADDRESS = "http://127.0.0.1:8000"  # where the README's recipes expect toolwire


def section(title: str) -> str:
    """The text of the README section headed ``## title`` or ``### title`` (up to the next heading
    of the same or a higher level)."""
    match = re.search(rf"^(#{{2,3}}) {re.escape(title)}\n", README, re.MULTILINE)
    assert match, f"README has no section {title!r}"
    level = len(match.group(1))
    after = README[match.end():]
    end = re.search(rf"^#{{2,{level}}} ", after, re.MULTILINE)
    return after[: end.start() if end else len(after)]


def shell_blocks(title: str) -> list[str]:
    """The ```sh blocks of a section, in order."""
    return re.findall(r"^```sh\n(.*?)^```", section(title), re.MULTILINE | re.DOTALL)


def script(block: str, address: str) -> str:
    """A recipe as a bash script talking to toolwire at ``address`` (see the module docstring)."""
    lines = [line for line in block.splitlines() if not line.startswith("toolwire serve")]
    body = "\n".join(lines).replace(ADDRESS, address).replace('"…"', '"$TASK"')
    return "set -euo pipefail\n" + body + "\n"


def run(block: str, address: str, *, env: dict[str, str], cwd: Path, timeout: float = 240,
        edit: tuple[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run a recipe with bash (in a process group of its own, all of it killed on a timeout). ``edit``
    (old, new) changes one thing a test must (e.g. a sandbox flag) and must occur in the recipe."""
    text = script(block, address)
    if edit is not None:
        assert edit[0] in text, f"the recipe no longer has {edit[0]!r}"
        text = text.replace(edit[0], edit[1])
    process = subprocess.Popen(["bash", "-c", text], cwd=cwd, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, err = process.communicate()
        raise AssertionError(f"the recipe did not finish in {timeout:.0f}s:\n{text}\n{out[-2000:]}\n{err[-2000:]}") from None
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)
