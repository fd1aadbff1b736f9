"""The deployment files parse as the Kubernetes objects they claim to be, and agree with the code."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from kubernetes.client import ApiClient

from trainguard.settings import load_settings

DEPLOY = Path(__file__).parents[3] / "deploy"


def _objects(name: str) -> list[dict[str, Any]]:
    return list(yaml.safe_load_all((DEPLOY / name).read_text()))


def _as_model(obj: dict[str, Any]) -> Any:
    """Deserialise through the official client's models (unknown kinds or wrong types fail)."""
    return ApiClient()._ApiClient__deserialize(obj, f"V1{obj['kind']}")  # type: ignore[attr-defined]


def test_daemonset_mounts_what_the_collectors_read_and_its_config_loads(tmp_path: Path) -> None:
    objs = _objects("collectors-daemonset.yaml")
    ds = _as_model(next(o for o in objs if o["kind"] == "DaemonSet"))
    spec = ds.spec.template.spec
    paths = {v.name: v.host_path.path for v in spec.volumes if v.host_path}
    assert paths == {"host-sys": "/sys", "kmsg": "/dev/kmsg", "spool": "/var/lib/trainguard"}
    container = spec.containers[0]
    assert container.security_context.privileged is False and container.security_context.capabilities.add == ["SYSLOG"]
    assert any(e.name == "NODE_NAME" and e.value_from.field_ref.field_path == "spec.nodeName" for e in container.env)
    config = next(o for o in objs if o["kind"] == "ConfigMap")["data"]["trainguard.yaml"]
    (tmp_path / "c.yaml").write_text(config)
    settings = load_settings(tmp_path / "c.yaml")
    assert str(settings.collectors.rdma_root) == "/host/sys/class/infiniband"
    assert settings.metrics.port == container.ports[0].container_port


def test_training_pod_runs_the_agent() -> None:
    pod = _as_model(_objects("training-pod.yaml")[0])
    container = pod.spec.containers[0]
    assert container.command[:2] == ["trainguard", "run"] and container.command[-1] == "--"
    names = {e.name for e in container.env}
    assert {"NODE_NAME", "POD_NAME", "TRAINGUARD_SECURITY__ACT_PUBLIC_KEYS", "TRAINGUARD_SECURITY__NODE_PRIVATE_KEY",
            "TRAINGUARD_COLLECTORS__AGENT__STATE_DIR"} <= names
    assert not [e for e in container.env if e.value_from and e.value_from.secret_key_ref]  # no secret in the env


def test_dockerfile_copies_existing_packages() -> None:
    root = DEPLOY.parent
    for line in (DEPLOY / "Dockerfile").read_text().splitlines():
        if line.startswith("COPY "):
            for src in line.split()[1:-1]:
                assert (root / src).exists(), src
