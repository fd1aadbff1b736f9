"""The node-problem-detector watcher through the real kubernetes client against the FAKE API server.

No Kubernetes API server can run here (tests/fake_kube_api.py validates every
request body against the API schema, as a strict server does). The test plays
NPD's part with the same client calls NPD's exporter makes: it patches the
node's status conditions and posts Events whose source is an NPD monitor. What
is real: the client, its (de)serialisation, the watcher, the detector.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from fake_kube_api import FakeKube
from fakes import ListSink
from kubernetes import client as k8s

from trainguard.collectors.metrics import CollectorMetrics
from trainguard.collectors.node import NodeLoop
from trainguard.collectors.npd import NpdWatcher
from trainguard.detectors.hardware import HardwareDetector
from trainguard.schemas.records import LogEvent, NodeCondition

NODE = "gpu-node-3"


@pytest.fixture
def kube() -> Iterator[tuple[FakeKube, k8s.CoreV1Api]]:
    with FakeKube([NODE, "gpu-node-4"], []) as fake:
        cfg = k8s.Configuration()
        cfg.host = fake.url
        yield fake, k8s.CoreV1Api(k8s.ApiClient(cfg))


def set_condition(api: k8s.CoreV1Api, type_: str, status: str, reason: str, message: str) -> None:
    """What NPD's Kubernetes exporter does: a strategic-merge patch of the node's status conditions."""
    now = datetime.now(UTC).isoformat().replace("+00:00", "Z")
    api.patch_node_status(NODE, {"status": {"conditions": [
        {"type": type_, "status": status, "reason": reason, "message": message,
         "lastHeartbeatTime": now, "lastTransitionTime": now}]}})


def post_event(api: k8s.CoreV1Api, reason: str, message: str, component: str = "kernel-monitor",
               node: str = NODE) -> None:
    """What NPD posts for a problem that is an event, not a condition."""
    now = datetime.now(UTC)
    api.create_namespaced_event("default", k8s.CoreV1Event(
        metadata=k8s.V1ObjectMeta(generate_name=f"{node}."),
        involved_object=k8s.V1ObjectReference(kind="Node", name=node, uid=node),
        reason=reason, message=message, type="Warning", count=1, first_timestamp=now, last_timestamp=now,
        source=k8s.V1EventSource(component=component, host=node)))


def feed(det: HardwareDetector, records: list[Any]) -> list[Any]:
    return [a for r in records for a in det.observe(r)]


def test_npd_conditions_become_records_once_per_state_and_a_deadlock_is_a_hw_fault(kube: Any) -> None:
    fake, api = kube
    watcher, det = NpdWatcher(node=NODE, api=api, job="llm"), HardwareDetector()
    set_condition(api, "KernelDeadlock", "False", "KernelHasNoDeadlock", "kernel has no deadlock")
    first = watcher.collect(100.0)
    assert [(c.condition, c.status) for c in first if isinstance(c, NodeCondition)] == [("KernelDeadlock", "False")]
    assert feed(det, first) == [] and watcher.collect(101.0) == []  # unchanged: not published again
    set_condition(api, "KernelDeadlock", "True", "DockerHung", "task docker:7 blocked for more than 120 seconds.")
    [deadlock] = watcher.collect(102.0)
    assert isinstance(deadlock, NodeCondition) and (deadlock.status, deadlock.reason, deadlock.job) == (
        "True", "DockerHung", "llm")
    [anomaly] = feed(det, [deadlock])
    assert anomaly.kind == "hw_fault" and anomaly.nodes == [NODE]
    assert anomaly.evidence["findings"][0]["cause"] == "node_condition"
    assert fake.rejected == []


def test_trainguard_healthy_and_the_kubelets_conditions_are_never_read_back(kube: Any) -> None:
    fake, api = kube
    watcher = NpdWatcher(node=NODE, api=api)
    set_condition(api, "TrainguardHealthy", "False", "HwFault", "evicted by trainguard (incident i1)")
    set_condition(api, "MemoryPressure", "True", "KubeletHasInsufficientMemory", "")
    assert watcher.collect(1.0) == []  # Ready (fake default), MemoryPressure and our own: none is NPD's


def test_npd_events_become_log_events_and_a_fatal_xid_in_one_is_a_hw_fault(kube: Any) -> None:
    fake, api = kube
    post_event(api, "KernelOops", "BUG: unable to handle kernel NULL pointer dereference")  # before: baseline
    watcher, det = NpdWatcher(node=NODE, api=api), HardwareDetector()
    assert watcher.collect(10.0) == []
    post_event(api, "NvidiaXid", "NVRM: Xid (PCI:0000:18:00): 79, pid=4242, GPU has fallen off the bus.")
    post_event(api, "NvidiaXid", "NVRM: Xid (PCI:0000:2a:00): 13, Graphics Exception", component="kernel-monitor")
    post_event(api, "Rebooted", "Node gpu-node-3 has been rebooted", component="kubelet")  # not NPD's
    post_event(api, "NvidiaXid", "NVRM: Xid (PCI:0000:18:00): 79", node="gpu-node-4")  # another node's
    events = watcher.collect(11.0)
    assert [e.message.split(",")[0] for e in events] == ["NvidiaXid: NVRM: Xid (PCI:0000:18:00): 79",
                                                         "NvidiaXid: NVRM: Xid (PCI:0000:2a:00): 13"]
    assert all(isinstance(e, LogEvent) and e.source == "node-problem-detector/kernel-monitor" for e in events)
    [anomaly] = feed(det, events)  # 79 is fatal, 13 an application's
    assert [f["code"] for f in anomaly.evidence["findings"]] == [79]
    assert watcher.collect(12.0) == []
    assert fake.rejected == []


def test_a_custom_gpu_condition_is_judged_by_the_xid_it_names(kube: Any) -> None:
    fake, api = kube
    watcher, det = NpdWatcher(node=NODE, api=api), HardwareDetector()
    set_condition(api, "GPUProblem", "True", "XidError", "NVRM: Xid (PCI:0000:18:00): 13, Graphics Exception")
    assert feed(det, watcher.collect(1.0)) == []
    set_condition(api, "GPUProblem", "True", "XidError", "NVRM: Xid (PCI:0000:18:00): 48, DBE (double bit error)")
    [anomaly] = feed(det, watcher.collect(2.0))
    assert anomaly.evidence["findings"][0]["code"] == 48


def test_an_unreachable_api_server_fails_the_collector_run_and_the_loop_goes_on() -> None:
    cfg = k8s.Configuration()
    cfg.host = "http://127.0.0.1:9"
    watcher = NpdWatcher(node=NODE, api=k8s.CoreV1Api(k8s.ApiClient(cfg)))
    sink, metrics = ListSink(), CollectorMetrics()
    loop = NodeLoop(sink=sink, metrics=metrics)  # type: ignore[arg-type]
    loop.add(watcher, interval_s=1.0)
    loop.run_once(loop._scheduled[0])
    assert metrics.registry.get_sample_value("trainguard_collector_success", {"collector": "npd"}) == 0.0
    assert sink.records == []
    loop.close()
