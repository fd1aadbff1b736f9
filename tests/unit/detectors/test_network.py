"""network: RDMA ports down (confirmed twice within a window) or failing slow (evicted only when it persists or recurs)."""

from __future__ import annotations

import pytest

from trainguard.detectors.network import NetworkDetector
from trainguard.schemas.records import RdmaPort, RdmaSample


def port(ts: float, **fields: object) -> RdmaSample:
    return RdmaSample(ts=ts, node="h1", ports=[RdmaPort(device="mlx5_1", port=1, **fields)])  # type: ignore[arg-type]


@pytest.mark.parametrize("readings,fires", [
    ([{}, {}, {}], False),
    ([{}, {"state": "DOWN"}], False),  # once is not confirmed
    ([{}, {"state": "DOWN"}, {"state": "DOWN"}], True),
    ([{}, {"state": "DOWN"}, {}, {"state": "DOWN"}], True),  # twice within the window, with a good one between
    ([{}, {"link_downed": 1}, {"link_downed": 2}], True),
    ([{"symbol_errors": 10}, {"symbol_errors": 11}, {"symbol_errors": 12}], False),  # isolated errors
    ([{"rcv_errors": 0}, {"rcv_errors": 80}, {"rcv_errors": 200}], False),  # a 10 s burst: transient, not evicted
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


def test_a_port_at_a_fraction_of_its_siblings_for_two_minutes_is_a_degraded_link_on_that_port() -> None:
    d = NetworkDetector()
    out = []
    for k in range(18):
        out += d.observe(_ports(10.0 * k, "n1", [1.0, 0.97, 0.25, 1.02]))
    [a] = out
    assert (a.kind, a.nodes, a.evidence["device"], a.evidence["cause"]) == ("network", ["n1"], "mlx5_2", "degraded")
    assert a.evidence["persistence"] == "persistent" and a.evidence["duration_s"] >= 120.0
    assert a.onset == 0.0 and 140.0 <= a.ts <= 180.0  # persistent fail-slow found within three minutes


def test_uneven_but_healthy_rails_and_idle_ports_are_not_degraded() -> None:
    d = NetworkDetector()
    out = []
    for k in range(10):
        out += d.observe(_ports(10.0 * k, "n1", [1.0, 0.7, 0.8, 1.1]))  # 30 % imbalance
        out += d.observe(_ports(10.0 * k, "n2", [1.0, 0.01, 0.02, 0.5], busy=1e6))  # an idle node: no traffic
    assert out == []


def _blip(d: NetworkDetector, t0: float, node: str = "n1", seconds: float = 60.0) -> list:
    """A port at a third of its siblings with a burst of symbol errors for `seconds`, then healthy again."""
    out, errors = [], 0
    for k in range(int(seconds // 10)):
        errors += 500
        out += d.observe(RdmaSample(ts=t0 + 10.0 * k, node=node, job="j", ports=[
            RdmaPort(device=f"mlx5_{i}", port=1, tx_bps=2.4e10 * s, rx_bps=2.4e10 * s,
                     symbol_errors=errors if i == 2 else 0) for i, s in enumerate([1.0, 0.98, 0.33, 1.01])]))
    for k in range(6):
        out += d.observe(RdmaSample(ts=t0 + seconds + 10.0 * k, node=node, job="j", ports=[
            RdmaPort(device=f"mlx5_{i}", port=1, tx_bps=2.4e10, rx_bps=2.4e10,
                     symbol_errors=errors if i == 2 else 0) for i in range(4)]))
    return out


def test_a_one_minute_link_fail_slow_that_recovers_is_a_counted_transient_never_an_incident() -> None:
    from trainguard.detectors.correlate import IncidentCorrelator
    d, corr = NetworkDetector(), IncidentCorrelator()
    [a] = _blip(d, 0.0, seconds=60.0)
    assert (a.kind, a.nodes, a.score, a.evidence["persistence"]) == ("network", ["n1"], 0.0, "transient")
    assert a.evidence["device"] == "mlx5_2" and 40.0 <= a.evidence["duration_s"] <= 60.0
    assert a.evidence["node_transients"] == 1
    assert corr.add(a) == []  # nothing to act on


def test_the_third_blip_of_one_node_within_an_hour_recurs_and_becomes_an_incident_with_its_history() -> None:
    d = NetworkDetector(recur_n=3, recur_window_s=3600.0)
    first, second = _blip(d, 0.0), _blip(d, 900.0)
    assert [a.evidence["persistence"] for a in first + second] == ["transient", "transient"]
    third = _blip(d, 1800.0)
    assert third[0].evidence["persistence"] == "recurring" and third[0].score == 1.0
    assert third[0].evidence["node_transients"] == 2 and len(third[0].evidence["history"]) == 2
    assert _blip(d, 1800.0 + 3 * 3600.0, node="n9")[0].evidence["persistence"] == "transient"  # another node


def test_a_port_that_goes_down_is_still_reported_at_once() -> None:
    d = NetworkDetector()
    out = d.observe(port(0.0)) + d.observe(port(10.0, state="DOWN")) + d.observe(port(20.0, state="DOWN"))
    [a] = out
    assert (a.evidence["cause"], a.ts) == ("port_down", 20.0)
