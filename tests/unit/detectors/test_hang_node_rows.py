"""hang keeps one row per node (its job, RDMA rate, spinning GPUs); snapshots from before the rows still restore.

Issue 23: the three per-node maps a GPU or RDMA sample read were three sets
of cold cache lines per sample at 12,500 nodes; one map of rows is one. A
worker that restores a task written by the previous release must carry on
with the same verdicts.
"""

from __future__ import annotations

import pickle

from trainguard.detectors.checks import feed
from trainguard.detectors.common import Bounded
from trainguard.detectors.hang import HangDetector
from trainguard.detectors.synthetic import Fleet
from trainguard.schemas.records import Anomaly, GpuStats, NodeGpuSample, RdmaPort, RdmaSample, Record


def _spinning(f: Fleet, seconds: int) -> list[Record]:
    """Every node's GPUs at 100 % and its RDMA silent, a sample of each per 10 s; the job makes no step."""
    out: list[Record] = []
    for _ in range(seconds // 10):
        f.ts += 10.0
        for n in range(f.nodes):
            node = f"node-{n:02d}"
            out += [NodeGpuSample(ts=f.ts, node=node, gpus=[GpuStats(index=i, util_pct=100.0) for i in range(4)]),
                    RdmaSample(ts=f.ts, node=node, ports=[RdmaPort(device="mlx5_0", port=1)])]
    return out


def _as_before_the_rows(d: HangDetector) -> HangDetector:
    """The detector as the previous release pickled it: node -> job, node -> RDMA rate, node -> busy."""
    state = dict(vars(d))
    rows = state.pop("_nodes")
    jobs, rates, busy = Bounded[str, str](rows.cap), Bounded[str, float](rows.cap), Bounded[str, bool](rows.cap)
    for node, row in rows.items():
        if row.job:
            jobs[node] = row.job
        if row.rdma is not None:
            rates[node] = row.rdma
        if row.busy is not None:
            busy[node] = row.busy
    old = HangDetector.__new__(HangDetector)
    vars(old).update(state, _node_job=jobs, _rdma=rates, _busy=busy)
    return pickle.loads(pickle.dumps(old))


def test_a_spinning_hang_fires_alike_after_a_snapshot_of_either_layout() -> None:
    f = Fleet(step_s=2.0)
    d = HangDetector()
    feed(d, f.steps(30) + _spinning(f, 20))
    assert {n: (r.job, r.rdma, r.busy) for n, r in d._nodes.items()} == {  # noqa: SLF001
        f"node-{n:02d}": ("job-a", 0.0, True) for n in range(f.nodes)}
    later = _spinning(f, 60)
    fired: list[list[Anomaly]] = []
    for twin in (pickle.loads(pickle.dumps(d)), _as_before_the_rows(d), d):
        fired.append(feed(twin, later))
        assert not hasattr(twin, "_node_job") and len(twin._nodes) == f.nodes  # noqa: SLF001
    assert [a.kind for a in fired[0]] == ["hang"] and fired[0][0].evidence["rdma_collapsed"] is True
    assert fired[0] == fired[1] == fired[2]


def test_a_node_known_only_by_its_rdma_is_placed_when_its_job_speaks() -> None:
    """An RDMA sample before any training record makes a row with no job; a step places it later."""
    f, d = Fleet(step_s=2.0), HangDetector()
    feed(d, [RdmaSample(ts=f.ts, node="node-00", ports=[RdmaPort(device="mlx5_0", port=1, tx_bps=5e9)])])
    assert (d._nodes["node-00"].job, d._nodes["node-00"].rdma) == ("", 5e9)  # noqa: SLF001
    feed(d, f.steps(2))
    assert (d._nodes["node-00"].job, d._nodes["node-00"].rdma) == ("job-a", 5e9)  # noqa: SLF001
