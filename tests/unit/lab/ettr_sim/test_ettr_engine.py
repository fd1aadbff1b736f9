"""ETTR accounting over a run: exact sums, overlap, clipping, the standby pool, over-eviction."""

from __future__ import annotations

from dataclasses import replace

import pytest

from trainguard.lab.ettr_sim.arrivals import Arrival, TraceHistory
from trainguard.lab.ettr_sim.costs import Loss
from trainguard.lab.ettr_sim.engine import run_policy, simulate
from trainguard.lab.ettr_sim.params import DAY_S, JobParams, SimParams, TrainguardCosts

PARAMS = SimParams(job=JobParams(nodes=4, days=1.0))


def _fixed(loss: Loss):  # type: ignore[no-untyped-def]
    return lambda arrival, since, standby, diagnose: loss


def _with(**costs: object) -> SimParams:
    return replace(PARAMS, trainguard=replace(TrainguardCosts(), **costs))  # type: ignore[arg-type]


def test_ettr_is_one_minus_unproductive_over_wall_clock() -> None:
    arrivals = [Arrival(1000.0, 0, "hang", ""), Arrival(50_000.0, 1, "nan", "")]
    result = run_policy("p", arrivals, [0.0, 0.0], _fixed(Loss(60, 30, 300, 600)), PARAMS, pool=None)
    assert result.loss.total_s == 2 * 990
    assert result.ettr == pytest.approx(1 - 1980 / DAY_S)
    assert result.by_kind["hang"].total_s == 990
    assert result.incidents == 2
    assert result.evicted_nodes == result.requeues == 0  # no pool: the policy evicts nothing itself


def test_an_incident_during_recovery_waits_and_the_end_clips() -> None:
    arrivals = [Arrival(DAY_S - 1000, 0, "hang", ""), Arrival(DAY_S - 900, 1, "hang", "")]
    result = run_policy("p", arrivals, [0.0, 0.0], _fixed(Loss(failover_s=800)), PARAMS, pool=None)
    # first: 800 s; second starts at DAY_S - 200 (after the first), clipped to 200 s
    assert result.loss.total_s == pytest.approx(1000)
    assert result.ettr == pytest.approx(1 - 1000 / DAY_S)


def _recorder(seen: list[tuple[bool, bool]]):  # type: ignore[no-untyped-def]
    def loss(arrival: Arrival, since: float, standby: bool, diagnose: bool) -> Loss:
        seen.append((standby, diagnose))
        return Loss(failover_s=1.0)
    return loss


def test_standby_pool_runs_dry_and_replenishes() -> None:
    arrivals = [Arrival(t, 0, "cuda_error", "") for t in (100.0, 200.0, 300.0, 20_000.0)]
    seen: list[tuple[bool, bool]] = []
    result = run_policy("p", arrivals, [0.0] * 4, _recorder(seen), _with(standby_replenish_s=10_000.0), pool=2)
    assert [s for s, _ in seen] == [True, True, False, True]
    assert result.requeues == 1
    assert result.evicted_nodes == 4 and result.over_evicted_nodes == 0


def test_an_empty_pool_requeues_every_eviction() -> None:
    arrivals = [Arrival(100.0, 0, "cuda_error", ""), Arrival(200.0, 0, "nan", "")]
    result = run_policy("p", arrivals, [0.0] * 2, _fixed(Loss(failover_s=1.0)), PARAMS, pool=0)
    assert result.requeues == 1  # the NaN evicts nothing


def test_an_ambiguous_incident_over_evicts_its_group_and_the_healthy_come_back_sooner() -> None:
    params = _with(over_evict_nodes=4, standby_replenish_s=10_000.0, healthy_return_s=1000.0)
    arrivals = [Arrival(100.0, 0, "hang", "", ambiguous=True),  # takes 4 of 5: culprit + 3 healthy
                Arrival(200.0, 1, "hang", "", ambiguous=True),  # 1 free < 4: requeue
                Arrival(2000.0, 2, "hang", "", ambiguous=True)]  # the 3 healthy are back: 4 free again
    seen: list[tuple[bool, bool]] = []
    result = run_policy("p", arrivals, [0.0] * 3, _recorder(seen), params, pool=5)
    assert seen == [(True, False), (False, False), (True, False)]
    assert result.requeues == 1
    assert result.over_evicted_nodes == 3 * 3 and result.evicted_nodes == 3 * 4
    assert result.over_evicted_per_day == pytest.approx(9.0)


def test_no_over_eviction_diagnoses_instead_and_pool_aware_falls_back_to_it() -> None:
    arrivals = [Arrival(100.0, 0, "hang", "", ambiguous=True), Arrival(200.0, 1, "hang", "", ambiguous=True)]
    seen: list[tuple[bool, bool]] = []
    never = run_policy("p", arrivals, [0.0] * 2, _recorder(seen), _with(over_evict_nodes=1), pool=5)
    assert seen == [(True, True), (True, True)] and never.over_evicted_nodes == 0 and never.diagnoses == 2
    seen.clear()
    aware = run_policy("p", arrivals, [0.0] * 2, _recorder(seen), _with(over_evict_nodes=4, pool_aware=True), pool=5)
    assert seen == [(True, False), (True, True)]  # 4 of 5 taken, then 1 free: diagnose, evict one
    assert aware.requeues == 0 and aware.over_evicted_nodes == 3 and aware.diagnoses == 1


def test_simulate_is_deterministic_and_trainguard_wins() -> None:
    events = [{"node_id": f"s{i}", "event_time": d, "event_type": "fault_start", "fault_type": {"Class": "GPU"}}
              for i in range(5) for d in (3.0, 40.0, 77.0)]
    history = TraceHistory.from_events(events, servers=10)
    params = SimParams(job=JobParams(nodes=100, days=30.0))
    a, b = simulate(history, params, seed=5), simulate(history, params, seed=5)
    assert a.trainguard.loss == b.trainguard.loss and a.baseline.loss == b.baseline.loss
    assert a.arrivals and 0 < a.baseline.ettr < a.trainguard.ettr < 1
    assert a.trainguard.incidents == a.baseline.incidents == len(a.arrivals)
    assert a.arrivals == b.arrivals and any(x.ambiguous for x in a.arrivals)
    assert {x.kind for x in a.arrivals if x.ambiguous} <= set(params.trainguard.ambiguous_share)
