"""Kubernetes executor through the official `kubernetes` client, against a FAKE API server.

No Kubernetes API server can run here, so the client talks HTTP to the fake
in tests/fake_kube_api.py. What is real: the client library, its serialisation,
the HTTP exchange and our executor. The fake validates every request body
against the API schema (wire field names and types, from the client's own
models), so a snake_case field like `time_added` fails these tests.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from trainguard.actions.executors.kubernetes import KubernetesExecutor
from trainguard.schemas.action_params import NoParams
from trainguard.schemas.records import ActionCommand


def command(action: str, node: str, reason: str = "hw_fault") -> ActionCommand:
    return ActionCommand(ts=1.0, id="c1", action=action, job="llm", nodes=[node],  # type: ignore[arg-type]
                         params=NoParams(reason=reason), incident_id="i1")


class FakeTime:
    """A clock that only moves when the executor sleeps, so timeouts are tested without waiting."""

    def __init__(self) -> None:
        self.now = 1_700_000_000.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.sleeps.append(s)
        self.now += s


def executor(kube: Any, t: FakeTime | None = None, **kw: Any) -> KubernetesExecutor:
    t = t or FakeTime()
    return KubernetesExecutor.connect(kubeconfig="", host=kube.url, clock=t.clock, sleep=t.sleep,
                                      poll_s=0.5, **kw)


def test_evict_drains_like_kubectl_and_leaves_a_trail(fake_kube: Any, kube_pod: Any) -> None:
    pods = [kube_pod("trainer-0", "n1"), kube_pod("agent-n1", "n1", daemonset=True),
            kube_pod("kube-proxy-n1", "n1", namespace="kube-system", mirror=True),
            kube_pod("done-job", "n1", phase="Succeeded"), kube_pod("trainer-1", "n2")]
    with fake_kube(["n1", "n2"], pods) as kube:
        kube.linger["training/trainer-0"] = 2  # terminates over a grace period
        result = executor(kube).execute(command("evict_node", "n1"), targets=["n1"])
        assert result.status == "ok", result.message
        node = kube.nodes["n1"]
        assert node["spec"]["unschedulable"] is True
        assert node["spec"]["taints"] == [{"key": "trainguard.io/evicted", "value": "hw_fault", "effect": "NoSchedule"}]
        report = result.details["nodes"]["n1"]
        assert report["evicted_pods"] == ["training/trainer-0"]
        assert report["skipped_pods"] == {"training/agent-n1": "DaemonSet pod",
                                          "kube-system/kube-proxy-n1": "mirror pod",
                                          "training/done-job": "finished (Succeeded)"}
        names = [p["metadata"]["name"] for p in kube.pods]
        assert "trainer-0" not in names and {"agent-n1", "kube-proxy-n1", "trainer-1"} <= set(names)
        # The waiting happened: the pod was listed while terminating before it was gone.
        assert sum(1 for r in kube.requests if r[1] == "/api/v1/pods") >= 3
        # node-problem-detector-style condition beside Ready
        cond = {c["type"]: c for c in node["status"]["conditions"]}
        assert cond["Ready"]["status"] == "True"
        assert cond["TrainguardHealthy"]["status"] == "False" and cond["TrainguardHealthy"]["reason"] == "HwFault"
        assert "incident i1" in cond["TrainguardHealthy"]["message"]
        # an Event on the node and one on the evicted pod
        about = {(e["involvedObject"]["kind"], e["involvedObject"]["name"]): e for e in kube.events}
        assert set(about) == {("Node", "n1"), ("Pod", "trainer-0")}
        assert about[("Node", "n1")]["metadata"]["namespace"] == "default"
        assert about[("Node", "n1")]["involvedObject"]["uid"] == "n1"  # what `kubectl describe node` matches
        assert about[("Pod", "trainer-0")]["involvedObject"]["uid"] == "uid-trainer-0"
        assert about[("Pod", "trainer-0")]["metadata"]["namespace"] == "training"
        assert about[("Pod", "trainer-0")]["type"] == "Warning"
        evictions = [r for r in kube.requests if r[1].endswith("/eviction")]
        assert [r[2]["kind"] for r in evictions] == ["Eviction"]
        assert kube.rejected == []


def test_existing_taints_keep_their_wire_format(fake_kube: Any) -> None:
    """The old bug: V1Taint.to_dict() wrote `time_added`; the API's name is `timeAdded`."""
    with fake_kube(["n1"], []) as kube:
        other = {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": "2026-11-30T10:00:00Z"}
        kube.nodes["n1"]["spec"]["taints"] = [other]
        ex = executor(kube)
        assert ex.execute(command("cordon_node", "n1"), targets=["n1"]).status == "ok"
        assert kube.nodes["n1"]["spec"]["taints"][0] == other
        assert ex.execute(command("uncordon_node", "n1"), targets=["n1"]).status == "ok"
        assert kube.nodes["n1"]["spec"]["taints"] == [other]
        assert kube.nodes["n1"]["spec"]["unschedulable"] is False
        cond = {c["type"]: c for c in kube.nodes["n1"]["status"]["conditions"]}
        assert cond["TrainguardHealthy"]["status"] == "True"
        assert [e["reason"] for e in kube.events] == ["TrainguardCordon", "TrainguardUncordon"]
        assert kube.rejected == []


def test_the_fake_rejects_a_snake_case_field(fake_kube: Any) -> None:
    """The fake's schema check is what would have caught the bug: prove it does."""
    with fake_kube(["n1"], []) as kube:
        api = client.CoreV1Api(client.ApiClient(client.Configuration(host=kube.url)))
        taint = client.V1Taint(key="k", effect="NoExecute", time_added="2026-11-30T10:00:00Z")
        with pytest.raises(ApiException) as err:
            api.patch_node("n1", {"spec": {"taints": [taint.to_dict()]}})  # what the old executor sent
        assert err.value.status == 400
        assert kube.rejected == ['unknown field "spec.taints[0].time_added"']
        with pytest.raises(ApiException):
            api.patch_node("n1", {"spec": {"unschedulable": "yes"}})
        assert kube.rejected[-1] == "spec.unschedulable: expected bool, got str"


def test_pdb_429_is_retried_with_backoff(fake_kube: Any, kube_pod: Any) -> None:
    with fake_kube(["n1"], [kube_pod("trainer-0", "n1")]) as kube:
        kube.pdb_blocks["training/trainer-0"] = 3
        t = FakeTime()
        result = executor(kube, t).execute(command("evict_node", "n1"), targets=["n1"])
        assert result.status == "ok", result.message
        assert t.sleeps[:3] == [1.0, 2.0, 4.0]
        assert sum(1 for r in kube.requests if r[1].endswith("/eviction")) == 4


def test_pdb_that_never_allows_fails_at_the_deadline(fake_kube: Any, kube_pod: Any) -> None:
    with fake_kube(["n1"], [kube_pod("trainer-0", "n1")]) as kube:
        kube.pdb_blocks["training/trainer-0"] = 10_000
        t = FakeTime()
        result = executor(kube, t, eviction_timeout_s=60, backoff_max_s=8).execute(
            command("evict_node", "n1"), targets=["n1"])
        assert result.status == "failed"
        assert "PodDisruptionBudget" in result.message
        assert max(t.sleeps) == 8.0 and sum(t.sleeps) <= 60
        assert kube.nodes["n1"]["spec"]["unschedulable"] is True  # still cordoned: nothing new lands


def test_pod_that_never_terminates_fails_after_the_timeout(fake_kube: Any, kube_pod: Any) -> None:
    with fake_kube(["n1"], [kube_pod("trainer-0", "n1")]) as kube:
        kube.linger["training/trainer-0"] = 10_000
        result = executor(kube, eviction_timeout_s=5).execute(command("evict_node", "n1"), targets=["n1"])
        assert result.status == "failed"
        assert "pods still on n1 after 5s: training/trainer-0" in result.message


def test_concurrent_node_edit_is_retried_not_overwritten(fake_kube: Any) -> None:
    with fake_kube(["n1"], []) as kube:
        kube.conflicts = 2
        result = executor(kube).execute(command("cordon_node", "n1"), targets=["n1"])
        assert result.status == "ok", result.message
        patches = [r for r in kube.requests if r[0] == "PATCH" and r[1] == "/api/v1/nodes/n1"]
        assert len(patches) == 3 and all("resourceVersion" in str(p[2]) for p in patches)


def test_namespaced_mode_lists_and_evicts_only_the_training_namespaces(fake_kube: Any, kube_pod: Any) -> None:
    pods = [kube_pod("trainer-0", "n1", namespace="team-a"), kube_pod("db-0", "n1", namespace="prod")]
    with fake_kube(["n1"], pods) as kube:
        result = executor(kube, namespaces=["team-a"], event_namespace="trainguard").execute(
            command("evict_node", "n1"), targets=["n1"])
        assert result.status == "ok", result.message
        assert [p["metadata"]["name"] for p in kube.pods] == ["db-0"]
        assert not any(r[1] == "/api/v1/pods" for r in kube.requests)  # no cluster-wide list
        assert {e["metadata"]["namespace"] for e in kube.events} == {"trainguard", "team-a"}


def test_unknown_node_is_a_failed_result_not_an_exception(fake_kube: Any) -> None:
    with fake_kube(["n1"], []) as kube:
        result = executor(kube).execute(command("cordon_node", "ghost"), targets=["ghost"])
        assert result.status == "failed" and "404" in result.message


def test_a_lemon_gets_its_own_condition_and_event_and_a_release_lifts_only_that(fake_kube: Any) -> None:
    """Quarantine sets `TrainguardLemon` True (validated by the fake as a NodeCondition) and a Warning Event;
    the release sets it False with a Normal Event, leaving the eviction's cordon to the node's return."""
    with fake_kube(["n1"], []) as kube:
        ex = executor(kube)
        assert ex.execute(command("cordon_node", "n1"), targets=["n1"]).status == "ok"
        done = ex.mark_lemon("n1", quarantined=True, reason="3 hw_fault incidents in 7 days (jobs a, b, c)")
        assert done["condition"] == "TrainguardLemon"
        cond = {c["type"]: c for c in kube.nodes["n1"]["status"]["conditions"]}
        assert cond["TrainguardLemon"]["status"] == "True" and cond["TrainguardLemon"]["reason"] == "RepeatedIncidents"
        assert "3 hw_fault incidents" in cond["TrainguardLemon"]["message"]
        assert cond["TrainguardHealthy"]["status"] == "False"  # the eviction's own condition is left alone
        lemon = kube.events[-1]
        assert (lemon["reason"], lemon["type"], lemon["involvedObject"]["name"]) == ("TrainguardLemon", "Warning", "n1")
        ex.mark_lemon("n1", quarantined=False, reason="released by alice")
        cond = {c["type"]: c for c in kube.nodes["n1"]["status"]["conditions"]}
        assert cond["TrainguardLemon"]["status"] == "False" and cond["TrainguardLemon"]["reason"] == "ReleasedByOperator"
        assert kube.nodes["n1"]["spec"]["unschedulable"] is True  # still cordoned: a release is not a return
        assert [e["reason"] for e in kube.events][-2:] == ["TrainguardLemon", "TrainguardLemonReleased"]
        assert kube.events[-1]["type"] == "Normal"
        with pytest.raises(ValueError, match="not a single node name"):
            ex.mark_lemon("gpu[1-9]", quarantined=True, reason="x")
        assert kube.rejected == []
