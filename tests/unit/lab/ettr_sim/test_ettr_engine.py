"""ETTR accounting over a run: exact sums, overlap, clipping, the standby pool."""

from __future__ import annotations

import pytest

from lab.ettr_sim.arrivals import Arrival, TraceHistory
from lab.ettr_sim.costs import Loss
from lab.ettr_sim.engine import run_policy, simulate
from lab.ettr_sim.params import DAY_S, JobParams, SimParams

PARAMS = SimParams(job=JobParams(nodes=4, days=1.0))


def _fixed(loss: Loss):  # type: ignore[no-untyped-def]
    return lambda arrival, since, standby: loss


def test_ettr_is_one_minus_unproductive_over_wall_clock() -> None:
    arrivals = [Arrival(1000.0, 0, "hang", ""), Arrival(50_000.0, 1, "nan", "")]
    result = run_policy("p", arrivals, [0.0, 0.0], _fixed(Loss(60, 30, 300, 600)), PARAMS, pool=0, replenish_s=0)
    assert result.loss.total_s == 2 * 990
    assert result.ettr == pytest.approx(1 - 1980 / DAY_S)
    assert result.by_kind["hang"].total_s == 990
    assert result.incidents == 2


def test_an_incident_during_recovery_waits_and_the_end_clips() -> None:
    arrivals = [Arrival(DAY_S - 1000, 0, "hang", ""), Arrival(DAY_S - 900, 1, "hang", "")]
    result = run_policy("p", arrivals, [0.0, 0.0], _fixed(Loss(failover_s=800)), PARAMS, pool=0, replenish_s=0)
    # first: 800 s; second starts at DAY_S - 200 (after the first), clipped to 200 s
    assert result.loss.total_s == pytest.approx(1000)
    assert result.ettr == pytest.approx(1 - 1000 / DAY_S)


def test_standby_pool_runs_dry_and_replenishes() -> None:
    arrivals = [Arrival(t, 0, "cuda_error", "") for t in (100.0, 200.0, 300.0, 20_000.0)]
    seen: list[bool] = []

    def loss(arrival: Arrival, since: float, standby: bool) -> Loss:
        seen.append(standby)
        return Loss(failover_s=1.0)

    result = run_policy("p", arrivals, [0.0] * 4, loss, PARAMS, pool=2, replenish_s=10_000.0)
    assert seen == [True, True, False, True]
    assert result.requeues == 1


def test_simulate_is_deterministic_and_trainguard_wins() -> None:
    events = [{"node_id": f"s{i}", "event_time": d, "event_type": "fault_start", "fault_type": {"Class": "GPU"}}
              for i in range(5) for d in (3.0, 40.0, 77.0)]
    history = TraceHistory.from_events(events, servers=10)
    params = SimParams(job=JobParams(nodes=100, days=30.0))
    a, b = simulate(history, params, seed=5), simulate(history, params, seed=5)
    assert a.trainguard.loss == b.trainguard.loss and a.baseline.loss == b.baseline.loss
    assert a.arrivals and 0 < a.baseline.ettr < a.trainguard.ettr < 1
    assert a.trainguard.incidents == a.baseline.incidents == len(a.arrivals)
