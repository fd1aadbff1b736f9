"""network: RDMA ports down or erroring, confirmed twice within a window."""

from __future__ import annotations

import pytest

from detectors.network import NetworkDetector
from schemas.records import RdmaPort, RdmaSample


def port(ts: float, **fields: object) -> RdmaSample:
    return RdmaSample(ts=ts, node="h1", ports=[RdmaPort(device="mlx5_1", port=1, **fields)])  # type: ignore[arg-type]


@pytest.mark.parametrize("readings,fires", [
    ([{}, {}, {}], False),
    ([{}, {"state": "DOWN"}], False),  # once is not confirmed
    ([{}, {"state": "DOWN"}, {"state": "DOWN"}], True),
    ([{}, {"state": "DOWN"}, {}, {"state": "DOWN"}], True),  # twice within the window, with a good one between
    ([{}, {"link_downed": 1}, {"link_downed": 2}], True),
    ([{"symbol_errors": 10}, {"symbol_errors": 11}, {"symbol_errors": 12}], False),  # isolated errors
    ([{"rcv_errors": 0}, {"rcv_errors": 80}, {"rcv_errors": 200}], True),
    ([{"xmit_discards": 0}, {"xmit_discards": 9000}, {"xmit_discards": 20000}], False),  # congestion
    ([{"link_downed": 5}, {"link_downed": 0}, {"link_downed": 0}], False),  # counter reset
])
def test_confirmation_table(readings: list[dict[str, object]], fires: bool) -> None:
    d = NetworkDetector(confirm_window_s=60)
    out = [a for i, r in enumerate(readings) for a in d.observe(port(10.0 * i, **r))]
    assert bool(out) == fires
    if fires:
        assert len(out) == 1 and out[0].nodes == ["h1"] and out[0].evidence["device"] == "mlx5_1"


def test_two_bad_readings_too_far_apart_do_not_confirm() -> None:
    d = NetworkDetector(confirm_window_s=60)
    assert d.observe(port(0.0, state="DOWN")) == []
    assert d.observe(port(500.0, state="DOWN")) == []
    assert d.observe(port(510.0, state="DOWN")) != []


@pytest.mark.parametrize("state,bad", [("ACTIVE", False), ("4: ACTIVE", False), ("active", False),
                                       ("1: DOWN", True), ("INIT", True), ("POLLING", True)])
def test_port_state_spellings(state: str, bad: bool) -> None:
    d = NetworkDetector()
    out = d.observe(port(0.0, state=state)) + d.observe(port(10.0, state=state))
    assert bool(out) == bad


def _ports(ts: float, node: str, shares: list[float], busy: float = 2.4e10) -> RdmaSample:
    return RdmaSample(ts=ts, node=node, job="j", ports=[
        RdmaPort(device=f"mlx5_{i}", port=1, tx_bps=busy * s, rx_bps=busy * s) for i, s in enumerate(shares)])


def test_a_port_at_a_fraction_of_its_siblings_with_no_errors_is_degraded() -> None:
    d = NetworkDetector()
    out = []
    for k in range(6):
        out += d.observe(_ports(10.0 * k, "n1", [1.0, 0.97, 0.25, 1.02]))
    assert len(out) == 1
    a = out[0]
    assert (a.kind, a.nodes, a.evidence["device"], a.evidence["cause"]) == ("network", ["n1"], "mlx5_2", "degraded")
    assert a.onset == 0.0 and a.ts == 20.0  # three samples confirm


def test_uneven_but_healthy_rails_and_idle_ports_are_not_degraded() -> None:
    d = NetworkDetector()
    out = []
    for k in range(10):
        out += d.observe(_ports(10.0 * k, "n1", [1.0, 0.7, 0.8, 1.1]))  # 30 % imbalance
        out += d.observe(_ports(10.0 * k, "n2", [1.0, 0.01, 0.02, 0.5], busy=1e6))  # an idle node: no traffic
    assert out == []
