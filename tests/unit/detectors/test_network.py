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
