"""user_error from application XIDs: every node of a job faulting at once is its code; one node, or an XID 79, is not."""

from __future__ import annotations

from trainguard.detectors.hardware import HardwareDetector
from trainguard.detectors.logs import UserErrorDetector
from trainguard.schemas.records import Anomaly, JobTopology, NodeGpuSample, XidEvent

NODES = ["n0", "n1", "n2", "n3"]


def topology(nodes: list[str] = NODES, job: str = "j") -> JobTopology:
    return JobTopology(ts=0.0, job=job, world_size=8 * len(nodes),
                       rank_nodes={r: nodes[r // 8] for r in range(8 * len(nodes))})


def xid_sample(node: str, ts: float, code: int = 31, job: str = "j") -> NodeGpuSample:
    return NodeGpuSample(ts=ts + 1.0, node=node, job=job, xids=[XidEvent(gpu=3, code=code, ts=ts)])


def feed(det: UserErrorDetector | HardwareDetector, records: list) -> list[Anomaly]:
    return [a for r in records for a in det.observe(r)]


def test_application_xids_on_every_node_within_seconds_are_a_user_error_not_hardware() -> None:
    det, hw = UserErrorDetector(), HardwareDetector()
    stream = [topology(), *(xid_sample(n, 100.0 + i * 0.7, code=[13, 31, 43, 31][i]) for i, n in enumerate(NODES))]
    found = feed(det, stream)
    assert feed(hw, stream) == []  # never an eviction
    [crash] = found
    assert (crash.kind, crash.job, crash.nodes) == ("user_error", "j", NODES)
    assert crash.evidence["xid_codes"] == [13, 31, 43] and crash.onset == 100.0
    assert "all 4 nodes" in crash.evidence["match"]


def test_the_same_codes_on_only_some_nodes_of_the_job_are_nothing() -> None:
    det = UserErrorDetector()
    stream = [topology(), *(xid_sample(n, 100.0 + i) for i, n in enumerate(NODES[:3]))]
    assert feed(det, stream) == []


def test_application_xids_minutes_apart_on_each_node_are_background_noise_not_one_crash() -> None:
    det = UserErrorDetector()
    stream = [topology(), *(xid_sample(n, 100.0 + 400.0 * i) for i, n in enumerate(NODES))]
    assert feed(det, stream) == []


def test_one_nodes_xid_79_in_the_same_minutes_keeps_it_hardware() -> None:
    det, hw = UserErrorDetector(), HardwareDetector()
    stream = [topology(), xid_sample("n2", 95.0, code=79),
              *(xid_sample(n, 100.0 + i, code=43) for i, n in enumerate(NODES))]
    assert feed(det, stream) == []
    [evict] = feed(hw, stream)
    assert (evict.kind, evict.nodes) == ("hw_fault", ["n2"])


def test_a_single_node_job_is_never_blamed_on_one_xid() -> None:
    det = UserErrorDetector()
    assert feed(det, [topology(["n0"]), xid_sample("n0", 100.0)]) == []


def test_jobless_daemonset_samples_are_placed_by_the_topology() -> None:
    det = UserErrorDetector()
    stream = [topology(["a", "b"]), xid_sample("a", 50.0, job=""), xid_sample("b", 51.0, job="")]
    [crash] = feed(det, stream)
    assert (crash.job, crash.nodes) == ("j", ["a", "b"])


def test_a_second_crash_needs_xids_of_its_own_and_the_cooldown() -> None:
    det = UserErrorDetector(cooldown_s=120.0)
    first = [topology(), *(xid_sample(n, 100.0 + i) for i, n in enumerate(NODES))]
    assert len(feed(det, first)) == 1
    assert feed(det, [xid_sample("n0", 110.0)]) == []  # one more XID does not re-complete the set
    later = [xid_sample(n, 1000.0 + i) for i, n in enumerate(NODES)]
    assert len(feed(det, later)) == 1
