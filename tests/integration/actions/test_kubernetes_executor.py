"""Kubernetes executor through the official `kubernetes` client.

No Kubernetes cluster can run here, so the client talks HTTP to a fake API
server (`conftest.py`) that implements the endpoints the executor uses
with the real paths, verbs and object shapes. What is real: the client
library, its serialisation, the HTTP exchange and our executor.
"""

from __future__ import annotations

from actions.executors.kubernetes import KubernetesExecutor
from schemas.records import ActionCommand
from typing import Any


def command(action: str, node: str) -> ActionCommand:
    return ActionCommand(ts=1.0, id="c1", action=action, job="llm", nodes=[node],  # type: ignore[arg-type]
                         params={"reason": "hw_fault"}, incident_id="i1")


def test_evict_cordons_taints_and_evicts_training_pods_but_not_daemons(fake_kube: Any, kube_pod: Any) -> None:
    pods = [kube_pod("trainer-0", "n1"), kube_pod("agent-n1", "n1", daemonset=True), kube_pod("trainer-1", "n2")]
    with fake_kube(["n1", "n2"], pods) as kube:
        ex = KubernetesExecutor.connect(kubeconfig="", host=kube.url, clock=lambda: 2.0)
        result = ex.execute(command("evict_node", "n1"), targets=["n1"])
        assert result.status == "ok", result.message
        spec = kube.nodes["n1"]["spec"]
        assert spec["unschedulable"] is True
        assert spec["taints"] == [{"key": "trainguard.io/evicted", "value": "hw_fault", "effect": "NoSchedule"}]
        assert [p["metadata"]["name"] for p in kube.pods] == ["agent-n1", "trainer-1"]
        assert result.details["nodes"]["n1"]["evicted_pods"] == ["training/trainer-0"]
        evictions = [r for r in kube.requests if r[0] == "POST"]
        assert evictions[0][2]["kind"] == "Eviction"

        back = ex.execute(command("uncordon_node", "n1"), targets=["n1"])
        assert back.status == "ok"
        assert kube.nodes["n1"]["spec"]["unschedulable"] is False
        assert kube.nodes["n1"]["spec"]["taints"] == []


def test_unknown_node_is_a_failed_result_not_an_exception(fake_kube: Any) -> None:
    with fake_kube(["n1"], []) as kube:
        ex = KubernetesExecutor.connect(kubeconfig="", host=kube.url, clock=lambda: 2.0)
        result = ex.execute(command("cordon_node", "ghost"), targets=["ghost"])
        assert result.status == "failed" and "404" in result.message


def test_rbac_manifest_grants_exactly_what_the_executor_uses(fake_kube: Any, kube_pod: Any) -> None:
    """Least privilege: every rule is exercised by the executor, and every request is allowed by a rule."""
    import re
    from pathlib import Path

    import yaml

    manifest = Path(__file__).resolve().parents[3] / "deploy" / "rbac" / "trainguard-act.yaml"
    role = next(d for d in yaml.safe_load_all(manifest.read_text()) if d["kind"] == "ClusterRole")
    granted = {(res, verb) for rule in role["rules"] for res in rule["resources"] for verb in rule["verbs"]}
    with fake_kube(["n1"], [kube_pod("trainer-0", "n1")]) as kube:
        ex = KubernetesExecutor.connect(kubeconfig="", host=kube.url, clock=lambda: 2.0)
        assert ex.execute(command("evict_node", "n1"), targets=["n1"]).status == "ok"
        assert ex.execute(command("uncordon_node", "n1"), targets=["n1"]).status == "ok"
    verbs = {"GET": "get", "PATCH": "patch", "POST": "create"}
    used = set()
    for method, path, *_ in kube.requests:
        if re.fullmatch(r"/api/v1/nodes/[^/]+", path):
            used.add(("nodes", verbs[method]))
        elif path == "/api/v1/pods":
            used.add(("pods", "list"))
        elif path.endswith("/eviction"):
            used.add(("pods/eviction", "create"))
    assert used == granted
