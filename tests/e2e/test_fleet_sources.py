"""Acceptance: a fleet with only dcgm-exporter and node-problem-detector yields the NVML path's hw_fault incidents.

Two fleets of three nodes see the same injected faults, one job per node:

* node 0: GPU 1 falls off the bus (XID 79; NVML says the GPU is lost, DCGM reads it blank);
* node 1: a double-bit ECC error on GPU 0 (the counter grows, XID 48);
* node 2: XID 79 in the kernel log only (its GPU readings stay healthy).

The NVML fleet is trainguard's own node loop (`nvml_fleet.py`: NVML collector,
kernel-log reader) in a real process; NVML itself is a fake at its module
boundary (no GPU here). The other fleet is three real `trainguard collect
--source dcgm-exporter --npd` processes: each scrapes a local HTTP server
serving dcgm-exporter's exposition from fixtures (tests/dcgm_server.py) and
reads node-problem-detector's Events through the real kubernetes client from
the FAKE API server (tests/fake_kube_api.py, validating what it receives),
where the test posts what NPD's kernel monitor posts for node 2. One real
`trainguard worker` reads both fleets. Each fleet must get one hw_fault
incident per node, naming the same node and GPUs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from dcgm_server import DcgmExporterFixture
from fake_kube_api import FakeKube
from kubernetes import client as k8s
from processes import stop_all

from trainguard.schemas import Codec
from trainguard.schemas.records import Incident
from trainguard.schemas.topics import Topics
from trainguard.streams import kafka_io
from trainguard.streams.admin import ensure_topics

pytestmark = [pytest.mark.e2e, pytest.mark.broker]
HERE = Path(__file__).parent
XID79 = "NVRM: Xid (PCI:0000:2a:00): 79, pid=4242, name=python, GPU has fallen off the bus."
HEALTHY = {"gpus": [{}, {}], "xids": []}


def incidents(kafka: str, topics: Topics) -> list[Incident]:
    consumer = kafka_io.consumer(kafka_io.as_broker(kafka))
    try:
        parts = kafka_io.partitions_for(consumer, topics.name("incidents"))
        return [Codec().decode(m.value, Incident) for m in kafka_io.read_to_end(consumer, parts)]
    finally:
        consumer.close()


@pytest.fixture
def fleets(kafka: str, topic_prefix: str, tmp_path: Path) -> Iterator[dict[str, Any]]:
    topics = Topics(topic_prefix)
    ensure_topics(kafka_io.as_broker(kafka), topics.all(), partitions=2, replication=1, configs=topics.configs(),
                  partitions_of=topics.partitions(2))
    env = {**os.environ, "TRAINGUARD_BROKER__BOOTSTRAP": kafka, "TRAINGUARD_TOPICS__PREFIX": topic_prefix,
           "TRAINGUARD_TOPICS__PARTITIONS": "2", "TRAINGUARD_WORKER__APP_ID": f"w-{topic_prefix}",
           "TRAINGUARD_WORKER__STATE_DIR": str(tmp_path / "w"), "TRAINGUARD_COLLECTORS__NPD_INTERVAL_S": "1",
           "TRAINGUARD_METRICS__ENABLED": "false", "PYTHONUNBUFFERED": "1"}
    procs: list[subprocess.Popen[bytes]] = []

    def start(name: str, argv: list[str], **extra: str) -> None:
        log = (tmp_path / f"{name}.log").open("ab")
        procs.append(subprocess.Popen(argv, env={**env, **extra}, stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path))

    state = tmp_path / "nvml"
    state.mkdir()
    for i in range(3):
        (state / f"nvml-n{i}.json").write_text(json.dumps(HEALTHY))
        (state / f"nvml-n{i}.kmsg").write_text("")
    exporters = [DcgmExporterFixture("full_healthy.prom").__enter__() for _ in range(3)]
    kube = FakeKube([f"dcgm-n{i}" for i in range(3)], []).__enter__()
    start("worker", [sys.executable, "-m", "trainguard.cli", "worker"])
    start("nvml-fleet", [sys.executable, str(HERE / "nvml_fleet.py"), str(state),
                         *[f"nvml-n{i}:nvml-job{i}" for i in range(3)]])
    for i, exporter in enumerate(exporters):
        start(f"dcgm-n{i}", [sys.executable, "-m", "trainguard.cli", "collect", "--source", "dcgm-exporter",
                             "--url", exporter.url, "--npd", "--kube-host", kube.url, "--node", f"dcgm-n{i}",
                             "--job", f"dcgm-job{i}", "--no-rdma", "--no-kernel-log", "-v"],
              TRAINGUARD_COLLECTORS__SPOOL_DIR=str(tmp_path / f"spool-dcgm-{i}"))
    yield {"topics": topics, "state": state, "exporters": exporters, "kube": kube, "tmp": tmp_path}
    stop_all(procs, timeout_s=20)
    kube.__exit__()
    for exporter in exporters:
        exporter.__exit__()


def npd_posts_kernel_xid(kube: FakeKube, node: str) -> None:
    """What NPD's kernel monitor posts for an NVRM Xid line (a rule of its custom kernel-monitor config)."""
    cfg = k8s.Configuration()
    cfg.host = kube.url
    now = datetime.now(UTC)
    k8s.CoreV1Api(k8s.ApiClient(cfg)).create_namespaced_event("default", k8s.CoreV1Event(
        metadata=k8s.V1ObjectMeta(generate_name=f"{node}."), reason="NvidiaXid", message=XID79, type="Warning",
        involved_object=k8s.V1ObjectReference(kind="Node", name=node, uid=node), count=1, first_timestamp=now,
        last_timestamp=now, source=k8s.V1EventSource(component="kernel-monitor", host=node)))


def wait_ready(kafka: str, fleets: dict[str, Any], timeout_s: float = 120.0) -> None:
    """Every collector has its baseline: two scrapes per exporter, one NPD poll per node, NVML samples published."""
    deadline = time.monotonic() + timeout_s
    topics, kube = fleets["topics"], fleets["kube"]
    while time.monotonic() < deadline:
        scraped = all(e.scrapes >= 2 for e in fleets["exporters"])
        consumer = kafka_io.consumer(kafka_io.as_broker(kafka))
        try:
            parts = kafka_io.partitions_for(consumer, topics.name("gpu"))
            nodes = {Codec().decode(m.value).node for m in kafka_io.read_to_end(consumer, parts)}
        finally:
            consumer.close()
        event_polls = sum(1 for _, path, _, _ in list(kube.requests) if path == "/api/v1/events")
        if scraped and event_polls >= 3 and {f"nvml-n{i}" for i in range(3)} <= nodes:
            return
        time.sleep(1)
    raise AssertionError("the collectors did not all start within the timeout")


def wait_for(kafka: str, topics: Topics, want: int, timeout_s: float = 150.0) -> list[Incident]:
    deadline = time.monotonic() + timeout_s
    found: list[Incident] = []
    while time.monotonic() < deadline:
        found = [i for i in incidents(kafka, topics) if i.kind == "hw_fault"]
        if len({i.job for i in found}) >= want:
            time.sleep(3)  # anything more (a duplicate, a second incident) shows within a few seconds
            return [i for i in incidents(kafka, topics) if i.kind == "hw_fault"]
        time.sleep(2)
    return found


def test_dcgm_exporter_and_npd_give_the_same_hw_fault_incidents_as_nvml(kafka: str, fleets: dict[str, Any]) -> None:
    state, exporters, kube = fleets["state"], fleets["exporters"], fleets["kube"]
    wait_ready(kafka, fleets)  # a fault before a collector's first look would be its baseline, not news
    # node 0: GPU 1 falls off the bus
    (state / "nvml-n0.json").write_text(json.dumps({"gpus": [{}, {"lost": True}], "xids": [[1, 79]]}))
    exporters[0].serve("default_gpu1_off_bus.prom")
    # node 1: a double-bit ECC error on GPU 0
    (state / "nvml-n1.json").write_text(json.dumps({"gpus": [{"ecc_dbe": 1}, {}], "xids": [[0, 48]]}))
    exporters[1].serve("full_dbe_gpu0.prom")
    # node 2: XID 79 in the kernel log only
    with (state / "nvml-n2.kmsg").open("a") as kmsg:
        kmsg.write(XID79 + "\n")
    npd_posts_kernel_xid(kube, "dcgm-n2")

    found = wait_for(kafka, fleets["topics"], want=6)

    def view(prefix: str) -> list[tuple[str, list[str], list[str]]]:
        return sorted((i.job.removeprefix(prefix), [n.removeprefix(prefix) for n in i.nodes],
                       [g.removeprefix(prefix) for g in i.gpus]) for i in found if i.job.startswith(prefix))

    nvml = sorted((j.removeprefix("nvml-"), n, g) for j, n, g in view("nvml-"))
    dcgm = sorted((j.removeprefix("dcgm-"), n, g) for j, n, g in view("dcgm-"))
    assert nvml == [("job0", ["n0"], ["n0:1"]), ("job1", ["n1"], ["n1:0"]), ("job2", ["n2"], [])], found
    assert dcgm == nvml, found
    assert kube.rejected == []
