"""What can be checked of the container and deployment files without a Docker engine: they parse,
they only use settings that exist, and the image's entrypoint command runs."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import yaml

from app.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
SETTINGS = {"TOOLWIRE_" + name.upper() for name in Settings.model_fields}


def _dockerfile() -> str:
    return (ROOT / "Dockerfile").read_text()


def test_dockerfile_is_multistage_non_root_with_healthcheck() -> None:
    text = _dockerfile()
    assert len(re.findall(r"^FROM ", text, re.MULTILINE)) >= 2
    assert re.search(r"^USER (?!root)\S+", text, re.MULTILINE)
    assert "HEALTHCHECK" in text and "/health" in text
    for name in re.findall(r"TOOLWIRE_[A-Z_]+", text):
        assert name in SETTINGS, name


def test_dockerfile_entrypoint_runs() -> None:
    entrypoint = json.loads(re.search(r"^ENTRYPOINT (\[.*\])$", _dockerfile(), re.MULTILINE).group(1))
    assert entrypoint == ["toolwire", "serve"]
    toolwire = Path(sys.executable).parent / "toolwire"
    result = subprocess.run([str(toolwire), *entrypoint[1:], "--help"], capture_output=True, text=True, timeout=60,
                            check=False)
    assert result.returncode == 0 and "TOOLWIRE_BACKEND" in result.stdout


def test_compose_wires_toolwire_in_front_of_both_backends() -> None:
    compose = yaml.safe_load((ROOT / "deploy" / "docker-compose.yml").read_text())
    services = compose["services"]
    sidecar = services["toolwire"]
    assert sidecar["environment"]["TOOLWIRE_BACKEND"] == "http://llamacpp:8080"
    assert sidecar["environment"]["TOOLWIRE_REASONING_PARSER"] == "qwen3"
    assert sidecar["environment"]["TOOLWIRE_TOOL_CALL_PARSER"] == "qwen25"
    assert sidecar["depends_on"]["llamacpp"]["condition"] == "service_healthy"
    vllm = services["toolwire-vllm"]
    assert "vllm" in vllm["profiles"] and services["vllm"]["profiles"] == ["vllm"]
    args = vllm["command"]
    assert args[args.index("--tool-call-parser") + 1] == "qwen25"
    assert args[args.index("--reasoning-parser") + 1] == "qwen3"
    for service in services.values():
        for name in (service.get("environment") or {}):
            if name.startswith("TOOLWIRE_"):
                assert name in SETTINGS, name


def test_compose_and_k8s_flags_are_real_flags() -> None:
    from app.cli import build_parser

    compose = yaml.safe_load((ROOT / "deploy" / "docker-compose.yml").read_text())
    docs = list(yaml.safe_load_all((ROOT / "deploy" / "k8s" / "vllm-with-toolwire.yaml").read_text()))
    sidecar = next(c for c in docs[0]["spec"]["template"]["spec"]["containers"] if c["name"] == "toolwire")
    for args in (compose["services"]["toolwire-vllm"]["command"], sidecar["args"]):
        build_parser().parse_args(["serve", *args])  # exits on an unknown flag
    for env in sidecar["env"]:
        assert env["name"] in SETTINGS
