"""docker-compose.yml, the Dockerfile and the Prometheus config agree with each other and with the CLI.

There is no Docker engine here, so the stack cannot be started in a test.
What can be checked without one is what broke it before: every trainguard
service's command must parse with the real CLI behind the image's
ENTRYPOINT, every trainguard service must use the one image name, and every
Prometheus target must be a service that exposes that port and serves
metrics on it.
"""

from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from trainguard.cli import build_parser

ROOT = Path(__file__).resolve().parents[3]


def compose() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def dockerfile() -> str:
    return (ROOT / "deploy" / "Dockerfile").read_text()


def trainguard_services() -> dict[str, dict[str, Any]]:
    return {name: svc for name, svc in compose()["services"].items() if "build" in svc}


def image_name() -> str:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    return f"ghcr.io/trainguard/trainguard:{version}"


def test_dockerfile_is_multistage_pinned_non_root_with_healthcheck() -> None:
    text = dockerfile()
    bases = re.findall(r"^FROM\s+(\S+)", text, re.M)
    assert len(bases) >= 2, "multi-stage: a build stage and a runtime stage"
    pinned = re.search(r"^ARG PYTHON_IMAGE=python:(\d+\.\d+\.\d+)-slim", text, re.M)
    assert pinned, "base image pinned to a patch release"
    user = re.findall(r"^USER\s+(\S+)", text, re.M)
    assert user and user[-1] not in ("0", "root")
    assert re.search(r"^HEALTHCHECK .*healthcheck\.py", text, re.M | re.S)
    assert re.search(r'^ENTRYPOINT \["trainguard"\]', text, re.M)
    version = re.search(r'org\.opencontainers\.image\.version="([^"]+)"', text)
    assert version and image_name().endswith(":" + version.group(1))
    assert f"-t {image_name()} " in text


def lab_image_name() -> str:
    return image_name().replace("/trainguard:", "/trainguard-lab:")


def trainguard_argv(svc: dict[str, Any]) -> list[str]:
    """What follows `trainguard`: the command itself, or (a shell one shot) its script's first trainguard call."""
    if "entrypoint" not in svc:  # the image's ENTRYPOINT is `trainguard`
        return list(svc["command"])
    assert svc["entrypoint"][:2] == ["/bin/sh", "-ec"], "a shell one shot stops at the first failing command"
    first = shlex.split(svc["command"][0].split("&&")[0])
    assert first[0] == "trainguard"
    return first[1:]


@pytest.mark.parametrize("service", sorted(trainguard_services()))
def test_every_trainguard_command_parses_with_the_cli(service: str) -> None:
    svc = trainguard_services()[service]
    argv = trainguard_argv(svc)
    args = build_parser().parse_args(argv)
    assert args.command == argv[0]
    # A command that needs lab (its handler is wrapped by `needs_lab`) cannot run in the runtime image.
    if hasattr(args.handler, "__wrapped__"):
        assert (svc["image"], svc["build"]["dockerfile"]) == (lab_image_name(), "deploy/Dockerfile.lab"), service
    else:
        assert (svc["image"], svc["build"]["dockerfile"]) == (image_name(), "deploy/Dockerfile"), service


def test_the_runtime_image_leaves_lab_out_and_the_lab_image_has_it() -> None:
    copied = re.findall(r"^COPY\s+(\S+)", dockerfile(), re.M)
    assert "lab" not in copied and "scenarios" not in copied
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert "lab" in ignored
    lab_file = (ROOT / "deploy" / "Dockerfile.lab").read_text()
    assert "lab" in re.findall(r"^COPY\s+(\S+)", lab_file, re.M)
    assert '".[lab]"' in lab_file and f"-t {lab_image_name()} " in lab_file
    lab_ignored = [w for w in (ROOT / "deploy" / "Dockerfile.lab.dockerignore").read_text().splitlines()
                   if w and not w.startswith("#")]
    assert lab_ignored == [w for w in (ROOT / ".dockerignore").read_text().splitlines()
                           if w and not w.startswith("#") and w != "lab"]
    services = trainguard_services()
    assert any(s["image"] == lab_image_name() for s in services.values())  # the check above saw a lab service


def test_a_command_repeating_the_entrypoint_is_caught() -> None:
    """The old bug: ENTRYPOINT trainguard + command [trainguard, worker] ran `trainguard trainguard worker`."""
    with pytest.raises(SystemExit):
        build_parser().parse_args(["trainguard", "worker"])


def serves_metrics_on(svc: dict[str, Any]) -> set[str]:
    ports = {str(svc.get("environment", {}).get("TRAINGUARD_METRICS__PORT", ""))}
    cmd = [] if "entrypoint" in svc else svc.get("command", [])
    ports |= {cmd[i + 1] for i, a in enumerate(cmd[:-1]) if a == "--metrics-port"}
    return ports - {"", "0"}


def test_prometheus_targets_are_exposed_ports_that_serve_metrics() -> None:
    services = compose()["services"]
    prom = yaml.safe_load((ROOT / "deploy" / "prometheus" / "prometheus.yml").read_text())
    targets = [t for job in prom["scrape_configs"] for sc in job["static_configs"] for t in sc["targets"]]
    scraped = set()
    for target in targets:
        host, port = target.rsplit(":", 1)
        if host == "localhost":
            continue  # Prometheus itself
        svc = services[host]
        assert port in [str(p) for p in svc.get("expose", [])], f"{target}: port not exposed"
        assert port in serves_metrics_on(svc), f"{target}: service serves no metrics there"
        scraped.add(host)
    assert scraped == {name for name, svc in trainguard_services().items() if serves_metrics_on(svc)}
    assert scraped >= {"worker", "act"}


def test_mounted_files_exist_and_grafana_is_provisioned() -> None:
    for svc in compose()["services"].values():
        for volume in svc.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("./"):
                assert (ROOT / source).exists(), source
    datasource = yaml.safe_load((ROOT / "deploy/grafana/provisioning/datasources/prometheus.yaml").read_text())
    assert datasource["datasources"][0]["url"] == "http://prometheus:9090"
    provider = yaml.safe_load((ROOT / "deploy/grafana/provisioning/dashboards/trainguard.yaml").read_text())
    mounts = compose()["services"]["grafana"]["volumes"]
    assert any(m.split(":")[1].startswith(provider["providers"][0]["options"]["path"]) for m in mounts)


def test_healthcheck_probes_metrics_port_or_nothing() -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("healthcheck", ROOT / "deploy" / "healthcheck.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.health_url({"TRAINGUARD_METRICS__PORT": "9401"}) == "http://127.0.0.1:9401/metrics"
    assert module.health_url({"TRAINGUARD_HEALTH_URL": "http://x/healthz"}) == "http://x/healthz"
    assert module.health_url({}) == ""


def test_dashboard_and_alert_rules_query_metrics_trainguard_exports() -> None:
    """A renamed metric would leave a panel or an alert silently empty."""
    import json

    exported = "".join((ROOT / p).read_text() for p in ("streams/worker/metrics.py", "streams/act/metrics.py",
                                                         "collectors/metrics.py"))
    dashboard = json.dumps(json.loads((ROOT / "deploy/grafana/trainguard-dashboard.json").read_text()))
    rules = (ROOT / "deploy/helm/trainguard/files/alerts.yaml").read_text()
    used = set(re.findall(r"\b(trainguard_[a-z_]+)", dashboard + rules))
    assert used
    unknown = set()
    for metric in used:
        base = re.sub(r"_(total|bucket|sum|count|created)$", "", metric)
        if f'"{base}"' not in exported and f'"{metric}"' not in exported:
            unknown.add(metric)
    assert unknown == set()
