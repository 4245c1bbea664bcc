"""Claude Code and Codex with an image attached, live, through toolwire in front of a scripted vLLM
serving Qwen3.5's vision template (images go to vLLM's chat endpoint, toolwire's prompt in its
request template): Codex sends the picture (``codex exec -i``) as a Responses ``input_image``;
Claude Code reads it with its Read tool and sends it back as an ``image`` block in a Messages
``tool_result``. Each test passes only if the picture's bytes reached the backend where the template
puts images, and the scripted answer came back to the agent."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from app.local.artifacts import agent_cached, claude_code_cached, ensure_agent, ensure_claude_code
from app.media import sniff
from tests.scripted_backend import Script, ScriptedBackend
from tests.test_claude_code import run_claude
from tests.test_images import QWEN35, VISION_PAD, png

ANSWER = "The picture is one red pixel."
KEY = "sk-toolwire-images"


def prompt_of(body: dict[str, Any]) -> str:
    """The prompt a generation request carries (``/v1/completions``, or the chat endpoint's text part)."""
    if "prompt" in body:
        return str(body["prompt"])
    return "".join(p.get("text", "") for m in body["messages"] for p in m["content"] if p.get("type") == "text")


def pictures(backend: ScriptedBackend) -> list[tuple[str, list[bytes]]]:
    return [(prompt, images) for prompt, images in backend.media_requests if images]


@pytest.fixture
def vllm_vision(backend_factory, proxy_factory) -> tuple[ScriptedBackend, Any]:
    backend = backend_factory("vllm", model="Qwen/Qwen3.5-4B")
    proxy = proxy_factory(backend=backend.url, chat_template=str(QWEN35), reasoning_parser="qwen3",
                          tool_call_parser="qwen3_coder", api_key=[KEY])
    return backend, proxy


def test_codex_sends_an_attached_image(vllm_vision, tmp_path: Path) -> None:
    if shutil.which("npm") is None and not agent_cached("codex").exists():
        pytest.skip("npm is not installed, so Codex CLI (npm @openai/codex) cannot be installed")
    codex = ensure_agent("codex")
    assert codex is not None
    backend, proxy = vllm_vision
    backend.responder = lambda body: Script(pieces=["\n</think>\n\n", ANSWER] if "messages" in body else ["OK."])
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    (home / ".codex").mkdir(parents=True)
    (home / ".codex" / "config.toml").write_text(
        f'model = "qwen3.5"\nmodel_provider = "toolwire"\n\n[model_providers.toolwire]\nname = "toolwire"\n'
        f'base_url = "{proxy.url}/v1"\nwire_api = "responses"\nenv_key = "TOOLWIRE_API_KEY"\n')
    (work / "shot.png").write_bytes(png())
    env = {"PATH": f"{codex.parent}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}", "HOME": str(home),
           "TOOLWIRE_API_KEY": KEY}
    done = subprocess.run([str(codex), "exec", "--skip-git-repo-check", "What is in this picture?", "-i", "shot.png"],
                          cwd=work, env=env, capture_output=True, text=True, timeout=240, check=False,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-3000:])
    assert ANSWER in done.stdout
    seen = pictures(backend)
    assert seen, [b.get("path") for b in backend.bodies()]
    prompt, images = seen[-1]
    assert VISION_PAD in prompt and "What is in this picture?" in prompt
    assert [sniff(image) for image in images] == ["image/png"]


def test_claude_code_reads_an_image_and_sends_it_back_in_a_tool_result(vllm_vision, tmp_path: Path) -> None:
    if shutil.which("npm") is None and not claude_code_cached().exists():
        pytest.skip("npm is not installed, so Claude Code (npm @anthropic-ai/claude-code) cannot be installed")
    claude = ensure_claude_code()
    assert claude is not None
    backend, proxy = vllm_vision
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    home.mkdir()
    (work / "shot.png").write_bytes(png())
    task = "Look at the picture shot.png and tell me what it shows."

    def model(body: dict[str, Any]) -> Script:
        prompt = prompt_of(body)
        if "messages" in body and "<tool_response>" in prompt:
            return Script(pieces=["\n</think>\n\n", ANSWER])
        if task in prompt and "<tool_response>" not in prompt:
            call = (f"<tool_call>\n<function=Read>\n<parameter=file_path>\n{work / 'shot.png'}\n</parameter>\n"
                    "</function>\n</tool_call>")
            return Script(pieces=["\n</think>\n\n", call[:25], call[25:]])
        return Script(pieces=["OK."])

    backend.responder = model
    done = run_claude(claude, task, "Read", work, home, proxy.url, KEY)
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-2000:])
    result = json.loads(done.stdout)
    assert result["is_error"] is False and result["result"].strip() == ANSWER, result
    seen = pictures(backend)
    assert seen
    prompt, images = seen[-1]
    assert "<tool_response>\n" + VISION_PAD in prompt  # in the tool result, where the template puts it
    assert [sniff(image) for image in images] == ["image/png"]
