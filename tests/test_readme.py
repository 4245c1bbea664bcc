"""The README documents every registered parser name and every alias, and its agent recipes work as
written (run with bash against stand-in agents that record what they were given)."""

from __future__ import annotations

import json
import os
import tomllib
from itertools import pairwise
from pathlib import Path
from typing import Any

from parsers.registry import REASONING_ALIASES, REASONING_PARSERS, TOOL_ALIASES, TOOL_PARSERS
from tests.readme import README, section, shell_blocks
from tests.readme import run as readme_run


def test_every_parser_name_and_alias_is_documented() -> None:
    for name in [*TOOL_PARSERS, *TOOL_ALIASES, *REASONING_PARSERS, *REASONING_ALIASES]:
        assert f"`{name}`" in README, name


def test_every_serve_line_in_front_of_vllm_gives_a_chat_template() -> None:
    """vLLM publishes no chat template: a recipe without one would start a server that answers no chat."""
    lines = [line for line in README.splitlines() if line.startswith("toolwire serve --backend http://vllm")]
    assert len(lines) >= 4  # Running in front of your backend, Codex, Claude Code, opencode
    for line in lines:
        assert "--chat-template " in line, line


def test_the_two_setup_commands_come_first() -> None:
    head = README.split("## ", 2)[1]
    assert "make run" in head and "make test" in head


# ---------------------------------------------------------------- the agent recipes, run as written

CODEX_WROTE = '[projects."/home/me/work"]\ntrust_level = "trusted"\n'  # what Codex itself adds to config.toml


def _fake_agents(tmp_path: Path, *names: str) -> tuple[dict[str, str], Path]:
    """An environment whose ``names`` commands only record their arguments and environment."""
    bin_dir, record = tmp_path / "bin", tmp_path / "record"
    bin_dir.mkdir(parents=True)
    record.mkdir()
    for name in names:
        (bin_dir / name).write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > "{record}/{name}.args"\n'
                                    f'env > "{record}/{name}.env"\n')
        (bin_dir / name).chmod(0o755)
    home = tmp_path / "home"
    home.mkdir()
    env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}", "HOME": str(home),
           "TASK": "a task"}
    return env, record


def _codex_effective_config(home: Path, args: list[str]) -> dict[str, Any]:
    """The settings Codex 0.169 runs with: ``config.toml``, then ``-p NAME``'s ``NAME.config.toml`` layered
    over it, then each ``-c dotted.key=value`` (the value read as TOML, else taken as a string)."""

    def merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
        out = dict(base)
        for key, value in over.items():
            out[key] = merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
        return out

    codex_home = home / ".codex"
    config = tomllib.loads((codex_home / "config.toml").read_text())
    for flag, value in pairwise(args):
        if flag in ("-p", "--profile"):
            config = merge(config, tomllib.loads((codex_home / f"{value}.config.toml").read_text()))
    for flag, value in pairwise(args):
        if flag in ("-c", "--config"):
            key, _, raw = value.partition("=")
            try:
                parsed: Any = tomllib.loads(f"v = {raw}")["v"]
            except tomllib.TOMLDecodeError:
                parsed = raw
            node = config
            *parents, leaf = key.split(".")
            for part in parents:
                node = node.setdefault(part, {})
            node[leaf] = parsed
    return config


def test_every_codex_recipe_configures_toolwire_even_when_config_toml_ends_in_a_table(tmp_path: Path) -> None:
    blocks = [b for b in shell_blocks("Use with Codex") if "codex " in b]
    assert len(blocks) >= 2  # the profile file and the flags
    for number, block in enumerate(blocks):
        env, record = _fake_agents(tmp_path / str(number), "codex")
        home = Path(env["HOME"])
        (home / ".codex").mkdir()
        (home / ".codex" / "config.toml").write_text(CODEX_WROTE)
        done = readme_run(block, "http://127.0.0.1:9999", env=env, cwd=home)
        assert done.returncode == 0, (block, done.stderr)
        args = (record / "codex.args").read_text().splitlines()
        config = _codex_effective_config(home, args)
        assert config.get("model_provider") == "toolwire", (block, config)
        provider = config["model_providers"]["toolwire"]
        assert provider["base_url"] == "http://127.0.0.1:9999/v1" and provider["wire_api"] == "responses"
        assert provider["env_key"] == "TOOLWIRE_API_KEY" and config["web_search"] == "disabled"
        assert tomllib.loads((home / ".codex" / "config.toml").read_text()) == tomllib.loads(CODEX_WROTE)


def test_the_opencode_recipe_writes_a_config_opencode_reads(tmp_path: Path) -> None:
    [block] = shell_blocks("opencode")
    env, record = _fake_agents(tmp_path, "opencode")
    done = readme_run(block, "http://127.0.0.1:9999", env=env, cwd=Path(env["HOME"]))
    assert done.returncode == 0, done.stderr
    seen = dict(line.split("=", 1) for line in (record / "opencode.env").read_text().splitlines() if "=" in line)
    config = json.loads(Path(seen["OPENCODE_CONFIG"]).read_text())
    provider_name, model_name = config["model"].split("/")
    provider = config["provider"][provider_name]
    assert provider["options"]["baseURL"] == "http://127.0.0.1:9999/v1"
    assert provider["npm"] == "@ai-sdk/openai-compatible" and model_name in provider["models"]
    assert seen["TOOLWIRE_API_KEY"] == "sk-local"


def test_the_base_urls_and_node_versions_are_stated() -> None:
    rows = {line.split("|")[1]: line.split("|")[3].strip() for line in section("Use with other clients").splitlines()
            if line.startswith("| ") and line.count("|") == 4}
    by_client = {client: url for clients, url in rows.items() for client in ("Claude Code", "litellm `anthropic/",
                 "`anthropic` SDKs", "createAnthropic", "opencode (", "Qwen Code", "aider", "Codex") if client in clients}
    for client in ("Claude Code", "litellm `anthropic/", "`anthropic` SDKs"):
        assert by_client[client].startswith("`http://host:port`"), client
    for client in ("createAnthropic", "opencode (", "Qwen Code", "aider", "Codex"):
        assert by_client[client].startswith("`http://host:port/v1`"), client
    text = " ".join(section("Use with other clients").split())
    assert "AI SDK 7 (`ai@7`, `@ai-sdk/*@4`) and Qwen Code need Node ≥ 22" in text
    for recipe in ("opencode", "Qwen Code", "aider"):
        assert shell_blocks(recipe), recipe
