"""Resampling arrivals from a trace: scaling, determinism, the mix."""

from __future__ import annotations

import random
from typing import Any

import pytest

from trainguard.lab.ettr_sim.arrivals import TraceHistory, draw_arrivals
from trainguard.lab.ettr_sim.params import JobParams, SimParams


def _events(faults_per_server: dict[str, list[float]]) -> list[dict[str, Any]]:
    return [{"node_id": n, "event_time": d, "event_type": "fault_start", "fault_type": {"Class": "GPU"}}
            for n, days in faults_per_server.items() for d in days]


def _uniform_trace(servers: int = 10, every_days: float = 10.0, span: float = 300.0) -> TraceHistory:
    days = [every_days * i + 0.5 for i in range(int(span / every_days))]
    return TraceHistory.from_events(_events({f"s{i}": days for i in range(servers)}), servers=servers)


def test_rate_is_faults_over_servers_times_span() -> None:
    history = TraceHistory.from_events(_events({"a": [1.0, 2.0], "b": [100.0]}), servers=10)
    assert history.faults_per_node_day == pytest.approx(3 / (10 * 100.0))


def test_count_scales_with_nodes_and_days() -> None:
    history = _uniform_trace()  # every server fails every 10 days
    params = SimParams(job=JobParams(nodes=50, days=40.0))
    arrivals = draw_arrivals(history, params, random.Random(1))
    assert len(arrivals) == 50 * 4  # 4 faults in any 40-day window of a 10-day period
    assert all(0 <= a.at_s < 40 * 86400 for a in arrivals)
    assert [a.at_s for a in arrivals] == sorted(a.at_s for a in arrivals)


def test_servers_that_never_failed_are_drawn_too() -> None:
    history = TraceHistory.from_events(_events({"bad": [float(d) for d in range(0, 200, 2)]}), servers=100)
    arrivals = draw_arrivals(history, SimParams(job=JobParams(nodes=400, days=20.0)), random.Random(3))
    nodes_hit = {a.node for a in arrivals}
    assert 0 < len(nodes_hit) < 20  # about 1 in 100 nodes borrows the bad server's history


def test_same_seed_same_arrivals_other_seed_differs() -> None:
    history, params = _uniform_trace(), SimParams(job=JobParams(nodes=30, days=30.0))
    first = draw_arrivals(history, params, random.Random(7))
    assert first == draw_arrivals(history, params, random.Random(7))
    assert first != draw_arrivals(history, params, random.Random(8))


def test_kinds_follow_the_mix() -> None:
    mix = {k: 0.0 for k in SimParams().mix} | {"hang": 0.5, "nan": 0.5}
    params = SimParams(job=JobParams(nodes=100, days=90.0), mix=mix)
    arrivals = draw_arrivals(_uniform_trace(), params, random.Random(0))
    kinds = [a.kind for a in arrivals]
    assert set(kinds) == {"hang", "nan"}
    assert 0.4 < kinds.count("hang") / len(kinds) < 0.6


def test_rate_scale_multiplies_arrivals() -> None:
    history = _uniform_trace()
    base = SimParams(job=JobParams(nodes=20, days=40.0))
    doubled = SimParams(job=JobParams(nodes=20, days=40.0), rate_scale=2.0)
    assert len(draw_arrivals(history, doubled, random.Random(0))) == 2 * len(draw_arrivals(history, base, random.Random(0)))


def test_trace_naming_more_servers_than_declared_is_refused() -> None:
    with pytest.raises(ValueError, match="trace_servers"):
        TraceHistory.from_events(_events({"a": [1.0], "b": [2.0]}), servers=1)


def test_job_borne_kinds_stop_growing_past_the_reference_job() -> None:
    mix = {k: 0.0 for k in SimParams().mix} | {"cuda_error": 0.5, "manual_restart": 0.5}
    history = _uniform_trace()

    def counts(nodes: int) -> tuple[int, int]:
        kinds = [a.kind for a in draw_arrivals(history, SimParams(job=JobParams(nodes=nodes, days=40.0), mix=mix,
                                                                  reference_nodes=100), random.Random(2))]
        return kinds.count("cuda_error"), kinds.count("manual_restart")

    small, big = counts(100), counts(1000)
    assert 0.8 < big[0] / (10 * small[0]) < 1.2  # hardware scales with the nodes
    assert 0.7 < big[1] / small[1] < 1.3  # the job's own incidents do not
    unscaled = draw_arrivals(history, SimParams(job=JobParams(nodes=1000, days=40.0), mix=mix, reference_nodes=0),
                             random.Random(2))
    assert [a.kind for a in unscaled].count("manual_restart") > 5 * big[1]


def test_up_to_the_reference_size_the_draws_are_those_of_the_mix_alone() -> None:
    history, params = _uniform_trace(), SimParams(job=JobParams(nodes=30, days=30.0))
    assert draw_arrivals(history, params, random.Random(4)) == draw_arrivals(
        history, SimParams(job=params.job, job_borne=frozenset()), random.Random(4))
