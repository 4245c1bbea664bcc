"""Codex CLI (npm ``@openai/codex``, cached by ``make artifacts``) runs a task through toolwire's
Responses API in front of a scripted vLLM backend serving Qwen3's format: the model asks for one
``exec_command`` call, Codex runs it, sends the output back, and the model answers.

Codex is set up by running the README's "Use with Codex" recipes with bash, as written (only the
address, the task and a sandbox flag differ): the profile file and the ``-c`` flags, each with a
``config.toml`` that ends in a ``[projects."…"]`` table as Codex writes it (keys appended there would
land in that table). A second run sets the provider in ``config.toml`` itself with the hosted
``web_search`` tool left on: toolwire leaves it out of the prompt. The test passes only if the command
really ran (its file exists with the computed text) and its output reached the model's next prompt as
a tool result.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
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


def scripted_model(body: dict[str, Any]) -> Script:
    prompt: str = body["prompt"]
    turn = prompt[prompt.rfind("<|im_start|>user"):]  # tool results are user turns in Qwen3's template
    if OUTPUT in turn and "<tool_response>" in turn:
        return Script(pieces=["<think>\nThe command worked.\n</think>\n\n", ANSWER])
    if TASK in prompt and "<tool_response>" not in prompt:
        call = json.dumps({"name": "exec_command", "arguments": {"cmd": COMMAND}})
        return Script(pieces=["<think>\nOne echo does it.\n</think>\n\n", "<tool_call>\n", call[:30], call[30:],
                              "\n</tool_call>"], delay=0.01)
    return Script(pieces=["OK."])


def codex_config(base_url: str) -> str:
    """Provider settings in ``config.toml`` itself, ``web_search`` left on."""
    return (f'model = "qwen3"\nmodel_provider = "toolwire"\n\n[model_providers.toolwire]\nname = "toolwire"\n'
            f'base_url = "{base_url}/v1"\nwire_api = "responses"\nenv_key = "TOOLWIRE_API_KEY"\n')


@pytest.fixture
def codex() -> Path:
    if shutil.which("npm") is None and not agent_cached("codex").exists():
        pytest.skip("npm is not installed, so Codex CLI (npm @openai/codex) cannot be installed")
    binary = ensure_agent("codex")
    assert binary is not None
    return binary


RECIPES = {"profile file": 0, "-c flags": 1}  # the README's Codex recipes, by their place in its section


@pytest.mark.parametrize("recipe", [*RECIPES, "config.toml"])
def test_codex_runs_a_shell_task_through_toolwire(recipe: str, codex: Path, tmp_path: Path, backend_factory,
                                                  proxy_factory) -> None:
    backend = backend_factory("vllm", model="Qwen/Qwen3-8B")
    backend.responder = scripted_model
    proxy = proxy_factory(backend=backend.url, chat_template=str(QWEN3_TEMPLATE), reasoning_parser="qwen3",
                          tool_call_parser="qwen25", api_key=[KEY])
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    (home / ".codex").mkdir(parents=True)
    env = {"PATH": f"{codex.parent}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}", "HOME": str(home),
           "TOOLWIRE_API_KEY": KEY, "TASK": TASK}
    if recipe in RECIPES:
        (home / ".codex" / "config.toml").write_text(f'[projects."{work}"]\ntrust_level = "trusted"\n')
        block = [b for b in readme.shell_blocks("Use with Codex") if "codex " in b][RECIPES[recipe]]
        done = readme.run(block, proxy.url, env=env, cwd=work, edit=("codex exec ", "codex exec -s danger-full-access "))
    else:
        (home / ".codex" / "config.toml").write_text(codex_config(proxy.url))
        done = subprocess.run([str(codex), "exec", "--skip-git-repo-check", "-s", "danger-full-access", TASK],
                              cwd=work, env=env, capture_output=True, text=True, timeout=240, check=False,
                              stdin=subprocess.DEVNULL)
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-3000:])
    assert ANSWER in done.stdout
    assert (work / "result.txt").read_text().strip() == OUTPUT  # the shell call really ran
    prompts = [b["prompt"] for b in backend.bodies()]
    assert any(TASK in p and "<tool_response>" in p and OUTPUT in p for p in prompts)  # its output came back
    assert not any('"name": "web_search"' in p for p in prompts)  # disabled, or left out by toolwire
