"""network keeps its ports in one row per node; snapshots keyed by (node, device, port) still restore.

Issue 23: a sample looked up each of its ports in one map of every port of
the fleet, each lookup its own cold cache lines at 12,500 nodes; a row per
node is one lookup per sample. A worker restoring a task written by the
previous release must carry on with the same counters and verdicts, and a
stream naming ever new ports must not grow a node's row without bound.
"""

from __future__ import annotations

import pickle

from trainguard.detectors.common import Bounded, SlotRows
from trainguard.detectors.network import PORTS_PER_NODE, NetworkDetector, _Port
from trainguard.schemas.records import Anomaly, RdmaPort, RdmaSample


def _sample(ts: float, node: str, *, state: str = "ACTIVE", downed: int = 0) -> RdmaSample:
    ports = [RdmaPort(device=f"mlx5_{i}", port=1, tx_bps=2e10, rx_bps=2e10,
                      state=state if i == 2 else "ACTIVE", link_downed=downed if i == 2 else 0) for i in range(4)]
    return RdmaSample(ts=ts, node=node, job="train", ports=ports)


def _as_before_the_rows(d: NetworkDetector) -> NetworkDetector:
    """The detector as the previous release pickled it: one map of every port, keyed (node, device, port)."""
    state = dict(vars(d))
    rows = state.pop("_ports")
    ports: Bounded[tuple[str, str, int], _Port] = Bounded(rows.cap * 8, SlotRows(_Port))
    for node, row in rows.items():
        for (device, port), value in row.items():
            ports[(node, device, port)] = value
    old = NetworkDetector.__new__(NetworkDetector)
    vars(old).update(state, _ports=ports)
    return pickle.loads(pickle.dumps(old))


def test_ports_carry_over_a_snapshot_of_either_layout() -> None:
    d = NetworkDetector(confirm_window_s=120.0)
    for t in range(3):
        for n in range(4):
            assert d.observe(_sample(float(t), f"n{n}", downed=5)) == []  # 5 downs counted before we looked
    assert sorted(d._ports["n1"]) == [(f"mlx5_{i}", 1) for i in range(4)]  # noqa: SLF001
    later: list[list[Anomaly]] = []
    for twin in (pickle.loads(pickle.dumps(d)), _as_before_the_rows(d), d):
        assert list(twin._ports) == ["n0", "n1", "n2", "n3"]  # noqa: SLF001 - grouped by node, in their order
        found = twin.observe(_sample(10.0, "n0", downed=5))  # no growth over the restored counter: nothing
        found += twin.observe(_sample(11.0, "n1", downed=6)) + twin.observe(_sample(12.0, "n1", state="DOWN",
                                                                                 downed=6))
        later.append(found)
    assert [(a.nodes, a.evidence["device"], a.evidence["cause"]) for a in later[0]] == [
        (["n1"], "mlx5_2", "port_down")]
    assert later[0] == later[1] == later[2]


def test_a_node_naming_ever_new_ports_keeps_only_its_newest() -> None:
    d = NetworkDetector()
    for k in range(3 * PORTS_PER_NODE):
        d.observe(RdmaSample(ts=float(k), node="n0", ports=[RdmaPort(device=f"forged{k}", port=1)]))
    row = d._ports["n0"]  # noqa: SLF001
    assert len(row) == PORTS_PER_NODE and ("forged0", 1) not in row and (f"forged{3 * PORTS_PER_NODE - 1}", 1) in row
    assert d._ports.evicted == 2 * PORTS_PER_NODE  # noqa: SLF001 - counted, so the metrics show the bound bit
