"""What can be checked of the container and deployment files without a Docker engine or a cluster:
they parse, the Kubernetes manifests match Kubernetes' own JSON schemas (``kubernetes-validate``), the
Caddyfile is valid to Caddy itself, and every port, environment variable, secret key, probe path and
image they name exists — in toolwire's settings and routes, or in the other files. The image's
entrypoint command runs."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import kubernetes_validate
import pytest
import yaml

from app.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
SETTINGS = {"TOOLWIRE_" + name.upper() for name in Settings.model_fields}
K8S = ROOT / "deploy" / "k8s"
COMPOSE = ROOT / "deploy" / "compose"
KUBERNETES_VERSION = "1.33.0"  # the schemas the manifests are checked against (kubernetes-validate ships them)


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


# ------------------------------------------------------------------------------ scaled out


def _routes() -> set[str]:
    from app.api.server import create_app

    app = create_app(Settings(backend="http://127.0.0.1:9"))
    return {path for route in app.routes if (path := getattr(route, "path", None))}


def _k8s() -> dict[str, list[dict[str, Any]]]:
    return {path.name: [d for d in yaml.safe_load_all(path.read_text()) if d] for path in sorted(K8S.glob("*.yaml"))}


def _find(kind: str, name: str | None = None) -> dict[str, Any]:
    found = [d for docs in _k8s().values() for d in docs
             if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(found) == 1, (kind, name, len(found))
    return found[0]


def _container(pod: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in pod["spec"]["template"]["spec"]["containers"] if c["name"] == name)


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


def _compose() -> dict[str, Any]:
    return yaml.safe_load((COMPOSE / "compose.yaml").read_text())


def test_every_deployment_file_parses() -> None:
    files = sorted((ROOT / "deploy").rglob("*.yaml")) + sorted((ROOT / "deploy").rglob("*.yml"))
    assert len(files) >= 6
    for path in files:
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
        assert docs, path
        if path.parent == K8S:
            assert all({"apiVersion", "kind"} <= d.keys() for d in docs), path


def test_kubernetes_manifests_match_the_kubernetes_schemas() -> None:
    """Every built-in kind against Kubernetes' own schema (strict: unknown fields fail); the two
    Gateway API kinds, whose schemas are CRDs, are checked field by field below."""
    checked = 0
    for docs in _k8s().values():
        for doc in docs:
            if doc["apiVersion"].startswith(("inference.networking.k8s.io/", "gateway.networking.k8s.io/",
                                             "kustomize.config.k8s.io/")):
                continue
            kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
            checked += 1
    assert checked >= 12
    with pytest.raises(kubernetes_validate.ValidationError):  # the check can fail
        kubernetes_validate.validate({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "x"},
                                      "spec": {"ports": [{"port": "eighty"}]}}, KUBERNETES_VERSION, strict=True)


def test_the_sidecar_pod_uses_only_what_toolwire_has() -> None:
    deployment = _find("Deployment", "qwen3")
    toolwire, vllm = _container(deployment, "toolwire"), _container(deployment, "vllm")
    env = _env(toolwire)
    assert set(env) <= SETTINGS, set(env) - SETTINGS
    ports = {p["name"]: p["containerPort"] for p in toolwire["ports"]}
    assert int(env["TOOLWIRE_PORT"]) == ports["http"]
    vllm_port = {p["name"]: p["containerPort"] for p in vllm["ports"]}["vllm"]
    assert urlsplit(env["TOOLWIRE_BACKEND"]).port == vllm_port == int(vllm["args"][vllm["args"].index("--port") + 1])
    routes = _routes()
    assert toolwire["livenessProbe"]["httpGet"]["path"] == "/livez"
    assert toolwire["readinessProbe"]["httpGet"]["path"] == "/readyz"
    for probe in ("livenessProbe", "readinessProbe"):
        assert toolwire[probe]["httpGet"]["path"] in routes
        assert toolwire[probe]["httpGet"]["port"] in ports
    # the three shared settings: the store (the Redis Service), the secret and the keys (the Secret)
    store = urlsplit(env["TOOLWIRE_RESPONSE_STORE"])
    redis = _find("Service", "redis")
    assert store.scheme == "redis" and store.hostname == "redis" and store.port == redis["spec"]["ports"][0]["port"]
    secret = _find("Secret", "toolwire-shared")
    for name in ("TOOLWIRE_THINKING_SECRET", "TOOLWIRE_API_KEY"):
        ref = env[name]["secretKeyRef"]
        assert ref["name"] == "toolwire-shared" and ref["key"] in secret["stringData"]
    service = _find("Service", "qwen3")
    assert service["spec"]["selector"] == deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["ports"][0]["targetPort"] in ports
    pdb = _find("PodDisruptionBudget", "qwen3")
    assert pdb["spec"]["selector"]["matchLabels"] == deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["replicas"] > pdb["spec"]["maxUnavailable"]


def test_stopping_a_pod_gives_toolwire_its_drain_and_grace() -> None:
    """SIGTERM reaches both containers; vLLM's preStop keeps the model up while toolwire drains
    (``TOOLWIRE_DRAIN_SECONDS``) and lets streams finish (``TOOLWIRE_SHUTDOWN_GRACE``); the pod's
    grace period covers all of it; readiness fails within the drain, so the pod leaves first."""
    deployment = _find("Deployment", "qwen3")
    toolwire, vllm = _container(deployment, "toolwire"), _container(deployment, "vllm")
    env = _env(toolwire)
    drain, grace = float(env["TOOLWIRE_DRAIN_SECONDS"]), float(env["TOOLWIRE_SHUTDOWN_GRACE"])
    command = vllm["lifecycle"]["preStop"]["exec"]["command"]
    assert command[0] == "sleep"
    pre_stop = float(command[1])
    period = deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert pre_stop >= drain + grace and period >= pre_stop + 5
    readiness = toolwire["readinessProbe"]
    assert readiness["periodSeconds"] * readiness.get("failureThreshold", 3) < drain
    assert "lifecycle" not in toolwire  # toolwire drains by itself on SIGTERM
    epp = _find("Deployment", "qwen3-epp")
    assert epp["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] >= period


def test_the_inference_pool_selects_the_model_server_pods_through_toolwire() -> None:
    """InferencePool v1 fields (inference.networking.k8s.io/v1): the pool selects the sidecar pods,
    traffic enters on toolwire's port, the endpoint picker is the Service named, and it reads vLLM's
    metrics from vLLM's own port."""
    deployment = _find("Deployment", "qwen3")
    pool = _find("InferencePool", "qwen3")
    assert pool["apiVersion"] == "inference.networking.k8s.io/v1"
    spec = pool["spec"]
    assert set(spec) <= {"selector", "targetPorts", "appProtocol", "endpointPickerRef"}
    assert set(spec["selector"]) == {"matchLabels"}
    assert spec["selector"]["matchLabels"] == deployment["spec"]["template"]["metadata"]["labels"]
    toolwire_port = {p["name"]: p["containerPort"] for p in _container(deployment, "toolwire")["ports"]}["http"]
    assert [p["number"] for p in spec["targetPorts"]] == [toolwire_port]
    picker = spec["endpointPickerRef"]
    assert set(picker) <= {"group", "kind", "name", "port", "failureMode"}
    assert picker.get("failureMode", "FailClose") in ("FailOpen", "FailClose")
    service = _find("Service", picker["name"])
    assert picker["port"]["number"] in [p["port"] for p in service["spec"]["ports"]]
    epp = _find("Deployment", picker["name"])
    assert service["spec"]["selector"] == epp["spec"]["template"]["metadata"]["labels"]
    args = dict(a.removeprefix("--").split("=", 1) for a in _container(epp, "epp")["args"])
    assert args["pool-name"] == pool["metadata"]["name"]
    assert args["pool-group"] == "inference.networking.k8s.io"
    vllm_port = {p["name"]: p["containerPort"] for p in _container(deployment, "vllm")["ports"]}["vllm"]
    assert int(args["model-server-metrics-port"]) == vllm_port != toolwire_port
    assert int(args["grpc-port"]) == picker["port"]["number"]
    route = _find("HTTPRoute", "qwen3")
    backends = [b for rule in route["spec"]["rules"] for b in rule["backendRefs"]]
    assert backends == [{"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": "qwen3"}]
    # only the endpoint picker may reach vLLM's port
    policy = _find("NetworkPolicy", "qwen3")
    rules = {r["ports"][0]["port"]: r.get("from") for r in policy["spec"]["ingress"]}
    assert rules[toolwire_port] is None
    assert rules[vllm_port] == [{"podSelector": {"matchLabels": epp["spec"]["template"]["metadata"]["labels"]}}]


def test_image_names_agree_across_the_files() -> None:
    images: dict[str, set[str]] = {}
    for docs in _k8s().values():
        for doc in docs:
            for container in (doc.get("spec", {}).get("template", {}).get("spec", {}).get("containers") or []):
                images.setdefault(container["name"], set()).add(container["image"])
    compose = _compose()["services"]
    old = yaml.safe_load((ROOT / "deploy" / "docker-compose.yml").read_text())["services"]
    assert images["toolwire"] == {"toolwire:latest"}
    assert {compose[f"toolwire-{i}"]["image"] for i in (1, 2, 3)} == {"toolwire:latest"}
    assert images["vllm"] == {old["vllm"]["image"]}
    assert compose["llamacpp"]["image"] == old["llamacpp"]["image"]
    redis_images = images["redis"] | {compose["redis"]["image"]}
    assert len(redis_images) == 1


def test_the_scaled_compose_file_runs_what_the_scale_tier_proved() -> None:
    """N replicas of one definition, on one Redis, one secret, one key file, behind Caddy running
    deploy/compose/Caddyfile (the file the scale tier runs) with every replica as an upstream."""
    services = _compose()["services"]
    replicas = sorted(name for name in services if name.startswith("toolwire-"))
    assert len(replicas) >= 3
    envs = [services[name]["environment"] for name in replicas]
    assert all(env == envs[0] for env in envs)  # one definition
    env = envs[0]
    assert set(env) <= SETTINGS, set(env) - SETTINGS
    store = urlsplit(env["TOOLWIRE_RESPONSE_STORE"])
    assert store.hostname in services and "redis-server" in services[store.hostname]["command"]
    assert env["TOOLWIRE_THINKING_SECRET"].startswith("${TOOLWIRE_THINKING_SECRET:?")
    assert env["TOOLWIRE_API_KEYS_FILE"] == "/run/secrets/" + services[replicas[0]]["secrets"][0]
    backend = urlsplit(env["TOOLWIRE_BACKEND"])
    assert backend.hostname in services and str(backend.port) in services[backend.hostname]["command"]
    grace = float(services[replicas[0]]["stop_grace_period"].removesuffix("s"))
    assert grace > float(env["TOOLWIRE_DRAIN_SECONDS"]) + float(env["TOOLWIRE_SHUTDOWN_GRACE"])
    caddy = services["caddy"]
    assert "./Caddyfile:/etc/caddy/Caddyfile:ro" in caddy["volumes"]
    port = env["TOOLWIRE_PORT"]
    assert caddy["environment"]["TOOLWIRE_UPSTREAMS"].split() == [f"{name}:{port}" for name in replicas]
    assert caddy["environment"]["HEALTH_URI"] in _routes()
    used = set(re.findall(r"\{\$([A-Z_]+)\}", (COMPOSE / "Caddyfile").read_text()))
    assert used == set(caddy["environment"])


def test_caddy_accepts_the_caddyfile(tmp_path: Path) -> None:
    """``caddy validate`` on deploy/compose/Caddyfile with the compose file's environment."""
    from tests.scale_cluster import CADDYFILE, caddy_binary

    caddy_env = {k: str(v) for k, v in _compose()["services"]["caddy"]["environment"].items()}
    result = subprocess.run([str(caddy_binary()), "validate", "--config", str(CADDYFILE), "--adapter", "caddyfile"],
                            capture_output=True, text=True, timeout=60, check=False,
                            env={**os.environ, **caddy_env, "HOME": str(tmp_path)})
    assert result.returncode == 0, result.stderr[-2000:]
    broken = subprocess.run([str(caddy_binary()), "validate", "--config", str(CADDYFILE), "--adapter", "caddyfile"],
                            capture_output=True, text=True, timeout=60, check=False,
                            env={**os.environ, **caddy_env, "HOME": str(tmp_path), "HEALTH_INTERVAL": "often"})
    assert broken.returncode != 0  # the check can fail


def test_every_toolwire_in_front_of_vllm_has_a_chat_template() -> None:
    """vLLM publishes no chat template, so toolwire there refuses to start without one: each
    deployment mounts the model's template where its ``--chat-template`` points, from a file that
    exists, and the start-up check passes with it."""
    from app.cli import build_parser, settings_from_args
    from app.runtime import validate_template_source

    # compose: the flag, and the file mounted at that path
    service = yaml.safe_load((ROOT / "deploy" / "docker-compose.yml").read_text())["services"]["toolwire-vllm"]
    args = service["command"]
    path = args[args.index("--chat-template") + 1]
    mounts = dict(reversed(v.rsplit(":", 2)[:2]) for v in service["volumes"])
    source = (ROOT / "deploy" / mounts[path]).resolve()
    assert source.is_file()
    settings = settings_from_args(build_parser().parse_args(["serve", *args]))
    validate_template_source(settings.model_copy(update={"chat_template": source}))
    # k8s: the environment's path, under a mount of a volume made from a ConfigMap the kustomization generates
    deployment = _find("Deployment", "qwen3")
    toolwire = _container(deployment, "toolwire")
    env = _env(toolwire)
    path = env["TOOLWIRE_CHAT_TEMPLATE"]
    mount = next(m for m in toolwire["volumeMounts"] if path.startswith(m["mountPath"] + "/"))
    volume = next(v for v in deployment["spec"]["template"]["spec"]["volumes"] if v["name"] == mount["name"])
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    generator = next(g for g in kustomization["configMapGenerator"] if g["name"] == volume["configMap"]["name"])
    files = dict(entry.split("=", 1) for entry in generator["files"])
    source = K8S / files[path[len(mount["mountPath"]) + 1:]]
    assert source.is_file()
    validate_template_source(Settings(backend_type=env["TOOLWIRE_BACKEND_TYPE"], chat_template=source))
