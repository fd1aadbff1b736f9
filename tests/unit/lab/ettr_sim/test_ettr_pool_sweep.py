"""The standby-pool sweep: the grid, pairing by seed, the trade-off's direction, and its presentation."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainguard.lab.ettr_sim import ParamError, SimParams
from trainguard.lab.ettr_sim.arrivals import TraceHistory
from trainguard.lab.ettr_sim.params import JobParams
from trainguard.lab.ettr_sim.sweep import best, pool_sizes, sweep
from trainguard.lab.ettr_sim.sweep_report import plot_sweep, sweep_json, sweep_markdown


def _history() -> TraceHistory:
    # 40 servers, a fault every 10 days on each: 10 a day in a 100-node job, so small pools run dry
    events = [{"node_id": f"s{i}", "event_time": 10.0 * d + i / 4, "event_type": "fault_start",
               "fault_type": {"Class": "GPU"}} for i in range(40) for d in range(30)]
    return TraceHistory.from_events(events, servers=40)


BASE = SimParams(job=JobParams(nodes=100, days=30.0))


def test_the_grid_has_every_cell_and_pairs_the_seeds() -> None:
    points = sweep(_history(), BASE, nodes=[50, 100], pool_percents=[0, 2, 10], groups=[1, 4], seeds=[0, 1])
    assert {(p.nodes, p.pool, p.group) for p in points} == {
        (n, pool, g) for n in (50, 100) for pool in pool_sizes(n, [0, 2, 10]) for g in (1, 4)}
    incidents = {p.incidents for p in points if p.nodes == 100}
    assert len(incidents) == 1  # the same dice in every cell of a job size
    assert all(p.seeds == 2 and p.ettr_min <= p.ettr <= p.ettr_max for p in points)


def test_more_standbys_mean_fewer_requeues_and_bigger_groups_more_over_eviction() -> None:
    points = sweep(_history(), BASE, nodes=[100], pool_percents=[0, 1, 4, 20], groups=[1, 2, 8], seeds=[0, 1, 2])
    at = {(p.pool, p.group): p for p in points}
    for g in (1, 2, 8):
        requeues = [at[pool, g].requeues for pool in (0, 1, 4, 20)]
        assert requeues == sorted(requeues, reverse=True) and requeues[0] > requeues[-1] == 0
        assert at[20, g].ettr > at[0, g].ettr
    over = [at[20, g].over_evicted_per_day for g in (1, 2, 8)]
    assert over[0] == 0 < over[1] < over[2]
    assert at[20, 1].diagnoses > 0 == at[20, 2].diagnoses
    assert at[4, 8].requeues > at[4, 2].requeues  # a big group drains a small pool
    top = best(points, 100)
    assert top.goodput == max(p.goodput for p in points) and top.goodput <= top.ettr


def test_an_empty_axis_or_a_negative_pool_is_refused() -> None:
    with pytest.raises(ParamError, match="sweep"):
        sweep(_history(), BASE, nodes=[100], pool_percents=[], groups=[2], seeds=[0])
    with pytest.raises(ParamError, match="pool percentages"):
        sweep(_history(), BASE, nodes=[100], pool_percents=[-1], groups=[2], seeds=[0])


def test_markdown_json_and_plot(tmp_path: Path) -> None:
    points = sweep(_history(), BASE, nodes=[100], pool_percents=[0, 4], groups=[1, 8], seeds=[0])
    md = sweep_markdown(points)
    assert "| standby pool | diagnose | group of 8 |" in md and md.count("\n| ") == 3  # header + 2 pools
    rows = sweep_json(points)
    assert len(rows) == 4 and {"goodput", "pool_pct", "requeues", "over_evicted_per_day"} <= set(rows[0])
    plot_sweep(points, tmp_path / "sweep.png")
    assert (tmp_path / "sweep.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
