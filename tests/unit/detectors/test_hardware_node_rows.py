"""hardware keeps one row per node (its job, its GPUs' counters); snapshots from before the rows still restore.

Issue 23: a GPU sample read the node's job map and its GPU map, two sets of
cold cache lines per sample at 12,500 nodes; one map of rows is one. A worker
that restores a task written by the previous release must carry on with the
same verdicts: counter growth measured from the restored counters, a job-less
kernel XID line blamed on the node's job.
"""

from __future__ import annotations

import pickle

from trainguard.detectors.common import Bounded, DictRows
from trainguard.detectors.hardware import HardwareDetector, _Gpu
from trainguard.schemas.records import Anomaly, GpuStats, LogEvent, NodeGpuSample


def _sample(ts: float, node: str, dbe: int = 0, job: str = "train") -> NodeGpuSample:
    return NodeGpuSample(ts=ts, node=node, job=job, gpus=[GpuStats(index=i, ecc_dbe=dbe if i == 3 else 0)
                                                          for i in range(8)])


def _as_before_the_rows(d: HardwareDetector) -> HardwareDetector:
    """The detector as the previous release pickled it: node -> {index: GPU} beside node -> job."""
    state = dict(vars(d))
    rows = state.pop("_nodes")
    gpus: Bounded[str, dict[int, _Gpu]] = Bounded(rows.cap, DictRows(_Gpu))
    jobs: Bounded[str, str] = Bounded(rows.cap)
    for node, row in rows.items():
        gpus[node] = row.gpus
        if row.job:
            jobs[node] = row.job
    old = HardwareDetector.__new__(HardwareDetector)
    vars(old).update(state, _nodes=gpus, _node_job=jobs)
    return pickle.loads(pickle.dumps(old))


def test_counters_and_jobs_carry_over_a_snapshot_of_either_layout() -> None:
    d = HardwareDetector()
    for t in range(3):
        for n in range(4):
            assert d.observe(_sample(float(t), f"n{n}", dbe=2)) == []  # counters known: 2 DBEs on GPU 3
    assert {n: (r.job, len(r.gpus), r.gpus[3].dbe) for n, r in d._nodes.items()} == {  # noqa: SLF001
        f"n{n}": ("train", 8, 2) for n in range(4)}
    later: list[list[Anomaly]] = []
    for twin in (pickle.loads(pickle.dumps(d)), _as_before_the_rows(d), d):
        assert not hasattr(twin, "_node_job") and twin.observe(_sample(10.0, "n0", dbe=2)) == []
        grown = twin.observe(_sample(11.0, "n1", dbe=3))  # one more DBE than the restored counter
        xid = twin.observe(LogEvent(ts=12.0, node="n2", source="kernel", level="error",
                                    message="NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus"))
        later.append(grown + xid)
    assert [(a.nodes, a.job, a.evidence["findings"][0]["cause"]) for a in later[0]] == [
        (["n1"], "train", "ecc_dbe_growth"), (["n2"], "train", "xid")]
    assert later[0] == later[1] == later[2]


def test_a_sample_without_a_job_keeps_the_job_its_node_was_placed_in() -> None:
    d = HardwareDetector()
    d.observe(_sample(0.0, "n0", job="a"))
    d.observe(_sample(1.0, "n0", job=""))  # a DaemonSet agent that knows no job
    assert d._nodes["n0"].job == "a"  # noqa: SLF001
    d.observe(_sample(2.0, "n0", job="b"))  # the node moved to another job
    assert d._nodes["n0"].job == "b"  # noqa: SLF001
