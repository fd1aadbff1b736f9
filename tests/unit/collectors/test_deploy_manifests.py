"""The deployment files parse as the Kubernetes objects they claim to be, and agree with the code."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from kubernetes.client import ApiClient

DEPLOY = Path(__file__).parents[3] / "deploy"


def _objects(name: str) -> list[dict[str, Any]]:
    return list(yaml.safe_load_all((DEPLOY / name).read_text()))


def _as_model(obj: dict[str, Any]) -> Any:
    """Deserialise through the official client's models (unknown kinds or wrong types fail)."""
    return ApiClient()._ApiClient__deserialize(obj, f"V1{obj['kind']}")  # type: ignore[attr-defined]


def test_training_pod_runs_the_agent_and_its_rendezvous_name_resolves() -> None:
    service, pod_obj = _objects("training-pod.yaml")
    pod = _as_model(pod_obj)
    container = pod.spec.containers[0]
    assert container.command[:2] == ["trainguard", "run"] and container.command[-1] == "--"
    names = {e.name for e in container.env}
    assert {"NODE_NAME", "POD_NAME", "TRAINGUARD_SECURITY__ACT_PUBLIC_KEYS", "TRAINGUARD_SECURITY__NODE_PRIVATE_KEY",
            "TRAINGUARD_COLLECTORS__AGENT__STATE_DIR"} <= names
    assert not [e for e in container.env if e.value_from and e.value_from.secret_key_ref]  # no secret in the env
    # --rdzv-endpoint=<hostname>.<subdomain>:port needs a headless Service named <subdomain> selecting the pod
    endpoint = next(a for a in container.args if a.startswith("--rdzv-endpoint=")).split("=", 1)[1]
    host, port = endpoint.rsplit(":", 1)
    assert host == f"{pod.spec.hostname}.{pod.spec.subdomain}"
    assert service["kind"] == "Service" and service["metadata"]["name"] == pod.spec.subdomain
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"].items() <= pod.metadata.labels.items()
    assert int(port) in [p["port"] for p in service["spec"]["ports"]]


def test_dockerfile_copies_existing_packages() -> None:
    root = DEPLOY.parent
    for line in (DEPLOY / "Dockerfile").read_text().splitlines():
        if line.startswith("COPY "):
            for src in line.split()[1:-1]:
                assert (root / src).exists(), src
