"""opencode (npm ``opencode-ai``, cached by ``make artifacts``) runs a task through toolwire's Chat
Completions API in front of a scripted vLLM backend serving Qwen3's format: the model asks for one
``bash`` call, opencode runs it, sends the output back, and the model answers.

opencode is set up by running the README's "opencode" recipe with bash, as written (only the address
and the task differ), beside a global ``opencode.json`` of the reader's own that the recipe must not
disturb. opencode talks through the AI SDK's ``@ai-sdk/openai-compatible`` provider, a client stack no
other test drives. The test passes only if the command really ran (its file exists with the computed
text), its output reached the model's next prompt as a tool result, and opencode asked for the
``max_tokens`` the recipe sets.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from app.local.artifacts import agent_cached, ensure_agent
from tests import readme
from tests.conftest import QWEN3_TEMPLATE
from tests.scripted_backend import Script

TASK = "Create the file result.txt holding the text toolwire-ok- followed by 6*7, using one shell command."
COMMAND = "echo toolwire-ok-$((6*7)) > result.txt && cat result.txt"
OUTPUT = "toolwire-ok-42"
ANSWER = "Done: result.txt holds toolwire-ok-42."
KEY = "sk-local"  # the key the README's recipe uses
#: opencode's switches for what it fetches on its own (model catalogue, updates, language servers)
QUIET = {"OPENCODE_DISABLE_MODELS_FETCH": "1", "OPENCODE_DISABLE_AUTOUPDATE": "1", "OPENCODE_DISABLE_SHARE": "1",
         "OPENCODE_DISABLE_LSP_DOWNLOAD": "1"}


def scripted_model(body: dict[str, Any]) -> Script:
    prompt: str = body["prompt"]
    turn = prompt[prompt.rfind("<|im_start|>user"):]  # tool results are user turns in Qwen3's template
    if OUTPUT in turn and "<tool_response>" in turn:
        return Script(pieces=["<think>\nThe command worked.\n</think>\n\n", ANSWER])
    if TASK in prompt and "<tool_response>" not in prompt and '"name": "bash"' in prompt:
        call = json.dumps({"name": "bash", "arguments": {"command": COMMAND, "description": "Write the result file"}})
        return Script(pieces=["<think>\nOne command does it.\n</think>\n\n", "<tool_call>\n", call[:30], call[30:],
                              "\n</tool_call>"], delay=0.01)
    return Script(pieces=["OK."])  # e.g. the session title opencode asks for on the side


@pytest.fixture
def opencode() -> Path:
    if shutil.which("npm") is None and not agent_cached("opencode").exists():
        pytest.skip("npm is not installed, so opencode (npm opencode-ai) cannot be installed")
    binary = ensure_agent("opencode")
    assert binary is not None
    return binary


def test_opencode_runs_a_shell_task_through_toolwire(opencode: Path, tmp_path: Path, backend_factory,
                                                     proxy_factory) -> None:
    backend = backend_factory("vllm", model="Qwen/Qwen3-8B")
    backend.responder = scripted_model
    proxy = proxy_factory(backend=backend.url, chat_template=str(QWEN3_TEMPLATE), reasoning_parser="qwen3",
                          tool_call_parser="qwen25", api_key=[KEY])
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    (home / ".config" / "opencode").mkdir(parents=True)
    own = {"$schema": "https://opencode.ai/config.json", "username": "reader"}
    (home / ".config" / "opencode" / "opencode.json").write_text(json.dumps(own))
    env = {"PATH": f"{opencode.parent}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}", "HOME": str(home),
           "TASK": TASK, **QUIET}
    [block] = readme.shell_blocks("opencode")
    done = readme.run(block, proxy.url, env=env, cwd=work)
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-3000:])
    assert ANSWER in done.stdout
    assert (work / "result.txt").read_text().strip() == OUTPUT  # the bash call really ran
    bodies = backend.bodies()
    assert any(TASK in b["prompt"] and "<tool_response>" in b["prompt"] and OUTPUT in b["prompt"] for b in bodies)
    assert {b["max_tokens"] for b in bodies if TASK in b["prompt"]} == {8192}  # the recipe's limit.output
    assert json.loads((home / ".config" / "opencode" / "opencode.json").read_text()) == own
