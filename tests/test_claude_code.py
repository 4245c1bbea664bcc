"""Claude Code (npm ``@anthropic-ai/claude-code``, cached by ``make artifacts``) runs a task through
toolwire's Messages API in front of a scripted vLLM backend serving Qwen3's format: the model asks
for one Bash call, Claude Code runs it, sends the result back, and the model answers.

The scripted model answers by what the prompt holds, the way a model would: the task → a Bash call;
the call's result → the final answer; anything else Claude Code asks on the side → a short text.
The test passes only if the command really ran (its file exists with the computed text) and its
output reached the model's next prompt as a tool result.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from app.local.artifacts import claude_code_cached, ensure_claude_code
from tests.conftest import QWEN3_TEMPLATE
from tests.proxy_server import ProxyServer
from tests.scripted_backend import Script, ScriptedBackend

TASK = "Create the file result.txt holding the text toolwire-ok- followed by 6*7, using one shell command."
COMMAND = "echo toolwire-ok-$((6*7)) > result.txt && cat result.txt"
OUTPUT = "toolwire-ok-42"
ANSWER = "Done: result.txt holds toolwire-ok-42."
KEY = "sk-toolwire-claude-code"


def scripted_model(body: dict[str, Any]) -> Script:
    prompt: str = body["prompt"]
    turn = prompt[prompt.rfind("<|im_start|>user"):]  # the latest user turn (tool results are user turns)
    if OUTPUT in turn and "<tool_response>" in turn:
        return Script(pieces=["<think>\nThe command worked.\n</think>\n\n", ANSWER])
    if TASK in prompt and "<tool_response>" not in prompt:
        call = {"name": "Bash", "arguments": {"command": COMMAND, "description": "Write the result file"}}
        return Script(pieces=["<think>\nOne echo does it.\n</think>\n\n", "<tool_call>\n",
                              json.dumps(call)[:40], json.dumps(call)[40:], "\n</tool_call>"], delay=0.01)
    return Script(pieces=["OK."])


def run_claude(claude: Path, task: str, tools: str, work: Path, home: Path, base_url: str,
               key: str) -> subprocess.CompletedProcess[str]:
    """Claude Code run once on ``task`` in ``work`` (``-p``, JSON output, ``tools`` allowed), offline
    against toolwire at ``base_url``."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "ANTHROPIC_BASE_URL": base_url,
           "ANTHROPIC_API_KEY": key, "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_TELEMETRY": "1",
           "DISABLE_AUTOUPDATER": "1", "DISABLE_ERROR_REPORTING": "1"}
    return subprocess.run([str(claude), "-p", task, "--output-format", "json", "--allowedTools", tools],
                          cwd=work, env=env, capture_output=True, text=True, timeout=240, check=False)


@pytest.fixture
def claude() -> Path:
    if shutil.which("npm") is None and not claude_code_cached().exists():
        pytest.skip("npm is not installed, so Claude Code (npm @anthropic-ai/claude-code) cannot be installed")
    binary = ensure_claude_code()
    assert binary is not None
    return binary


def test_claude_code_runs_a_bash_task_through_toolwire(claude: Path, tmp_path: Path, backend_factory,
                                                       proxy_factory) -> None:
    backend: ScriptedBackend = backend_factory("vllm", model="Qwen/Qwen3-8B")
    backend.responder = scripted_model
    proxy: ProxyServer = proxy_factory(backend=backend.url, chat_template=str(QWEN3_TEMPLATE),
                                       reasoning_parser="qwen3", tool_call_parser="qwen25", api_key=[KEY])
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    home.mkdir()
    done = run_claude(claude, TASK, "Bash", work, home, proxy.url, KEY)
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-2000:])
    result = json.loads(done.stdout)
    assert result["is_error"] is False and result["result"].strip() == ANSWER, result
    assert (work / "result.txt").read_text().strip() == OUTPUT  # the Bash call really ran
    prompts = [b["prompt"] for b in backend.bodies()]
    assert any(TASK in p and "<tool_response>" in p and OUTPUT in p for p in prompts)  # its output came back
    assert not any("x-anthropic-billing-header" in p for p in prompts)
