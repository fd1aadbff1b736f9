"""slowdown: change-point on job step time; stragglers by peers and GPU signals."""

from __future__ import annotations

import pytest

from trainguard.detectors.checks import observe_all
from trainguard.detectors.peers import GpuSlowSignals, StragglerTracker
from trainguard.detectors.slowdown import SlowdownDetector
from trainguard.detectors.synthetic import Fleet
from trainguard.schemas.records import GpuStats, NodeGpuSample, TrainingStep


@pytest.mark.parametrize("step_s,factor", [(1.0, 1.12), (2.0, 1.3), (6.0, 1.15), (20.0, 1.5)])
def test_a_persistent_straggler_is_found_within_three_minutes_and_localised(step_s: float, factor: float) -> None:
    f, d = Fleet(step_s=step_s, seed=int(step_s)), SlowdownDetector()
    assert observe_all(d, f.steps(max(40, int(600 / step_s)))) == []
    f.slow = {13: factor}
    start = f.ts
    out = observe_all(d, f.steps(max(30, int(240 / step_s))))
    assert len(out) == 1
    assert out[0].kind == "slowdown" and out[0].nodes == ["node-03"] and out[0].ranks == [13]
    assert out[0].ts - start <= 180.0 and out[0].ts - out[0].onset >= 120.0  # persisted 120 s; found within 3 min
    assert out[0].evidence["persistence"] == "persistent" and out[0].evidence["duration_s"] >= 120.0


def test_no_alarm_on_noise_or_a_checkpoint_step() -> None:
    f, d = Fleet(noise=0.05, seed=9), SlowdownDetector()
    out = observe_all(d, f.steps(300))
    out += observe_all(d, f.steps(1, bad={r: {"step_time_s": 60.0} for r in range(f.world)}))
    out += observe_all(d, f.steps(100))
    assert out == []


def test_systemic_slowdown_is_reported_without_blaming_a_node() -> None:
    f, d = Fleet(seed=2), SlowdownDetector()
    observe_all(d, f.steps(100))
    f.slow = {r: 1.3 for r in range(f.world)}
    out = observe_all(d, f.steps(60))
    assert len(out) == 1 and out[0].nodes == [] and out[0].evidence["localised_by"] == "none"


def test_gpu_signals_localise_when_compute_time_is_missing() -> None:
    f, d = Fleet(seed=4), SlowdownDetector()
    no_compute = {r: {"compute_time_s": None} for r in range(f.world)}
    observe_all(d, f.steps(100, bad=no_compute))
    f.slow, f.hot = {9: 1.3}, {2: {"throttle_reasons": 0x40, "temp_c": 92.0}}
    out = observe_all(d, f.steps(60, bad=no_compute))
    assert len(out) == 1 and out[0].nodes == ["node-02"] and out[0].evidence["localised_by"] == "gpu_signals"


def test_straggler_tracker_ignores_a_systemic_shift() -> None:
    t = StragglerTracker()
    f = Fleet()
    f.slow = {r: 1.5 for r in range(f.world)}
    for r in f.steps(20):
        if isinstance(r, TrainingStep):
            t.add(r)
    assert t.suspects("job-a") == ([], [], "none")


@pytest.mark.parametrize("gpu,slow", [
    ({"throttle_reasons": 0x04, "util_pct": 99}, False),  # software power cap: normal at full load
    ({"throttle_reasons": 0x40}, True),
    ({"throttle_reasons": 0x80}, True),
    ({"sm_clock_mhz": 1000, "max_sm_clock_mhz": 1980, "util_pct": 95}, True),
    ({"sm_clock_mhz": 1000, "max_sm_clock_mhz": 1980, "util_pct": 5}, False),  # idle, clocks down
])
def test_gpu_slow_signal_table(gpu: dict[str, object], slow: bool) -> None:
    s = GpuSlowSignals()
    s.add(NodeGpuSample(ts=1.0, node="n", gpus=[GpuStats(index=0, **gpu)]))  # type: ignore[arg-type]
    assert (s.slow_nodes(["n"], 2.0) == ["n"]) == slow


def test_a_heavier_pipeline_stage_is_not_a_straggler() -> None:
    """With pp=2 the last stage computes the loss and is always slower; compare within stages."""
    f = Fleet(nodes=4, gpus=4, tp=2, pp=2, seed=8)
    f.slow = {r: 1.2 for r in range(f.world) if f.coords(r)[2] == 1}
    t = StragglerTracker()
    for r in f.steps(30):
        if isinstance(r, TrainingStep):
            t.add(r)
    assert t.suspects("job-a") == ([], [], "none")
    f.slow[4] = 1.2 * 1.3  # rank 4 (stage 0) now straggles within its stage
    for r in f.steps(10):
        if isinstance(r, TrainingStep):
            t.add(r)
    assert t.suspects("job-a")[0] == [4]


def test_a_silent_straggler_node_in_a_small_job_is_named_from_compute_times_alone() -> None:
    """Two or three nodes: the slow node holds a third or half of the ranks, too many to be rank outliers."""
    for nodes in (2, 3):
        f, d = Fleet(nodes=nodes, gpus=8, tp=2, step_s=5.0), SlowdownDetector()
        out = []
        for r in f.steps(40):
            out += d.observe(r)
        f.slow = {r: 1.25 for r in range(8, 16)}  # node-01, no GPU signal at all
        for r in f.steps(40):
            out += d.observe(r)
        assert [(a.kind, a.nodes) for a in out] == [("slowdown", ["node-01"])], nodes
        assert out[0].ranks == list(range(8, 16))


def test_a_small_healthy_job_names_no_straggler() -> None:
    f, d = Fleet(nodes=2, gpus=8, tp=2, step_s=5.0, noise=0.03), SlowdownDetector()
    assert [a for r in f.steps(300) for a in d.observe(r)] == []
    assert d._peers.suspects("job-a") == ([], [], "none")


def _episode(d: SlowdownDetector, f: Fleet, seconds: float, factor: float = 1.3) -> list:
    f.slow = {13: factor}
    out = observe_all(d, f.steps(int(seconds / f.step_s)))
    f.slow = {}
    return out + observe_all(d, f.steps(int(120 / f.step_s)))


def test_a_gpu_throttling_for_forty_seconds_is_a_counted_transient_not_an_eviction() -> None:
    from trainguard.detectors.correlate import IncidentCorrelator
    f, d, corr = Fleet(step_s=2.0, seed=4), SlowdownDetector(), IncidentCorrelator()
    assert observe_all(d, f.steps(300)) == []
    found = _episode(d, f, 40.0)
    assert found and all(a.evidence["persistence"] == "transient" and a.score == 0.0 for a in found)
    assert [a.nodes for a in found] == [["node-03"]] and found[0].evidence["duration_s"] < 120.0
    assert [i for a in found for i in corr.add(a)] == []


def test_the_third_short_throttle_of_one_node_within_an_hour_recurs_and_is_reported_with_its_history() -> None:
    f, d = Fleet(step_s=2.0, seed=4), SlowdownDetector(recur_n=3)
    observe_all(d, f.steps(300))
    first = _episode(d, f, 40.0)
    observe_all(d, f.steps(200))
    second = _episode(d, f, 40.0)
    observe_all(d, f.steps(200))
    third = _episode(d, f, 40.0)
    assert [a.evidence["persistence"] for a in first + second] == ["transient", "transient"]
    [a] = third
    assert (a.evidence["persistence"], a.nodes, a.score) == ("recurring", ["node-03"], 1.0)
    assert a.evidence["node_transients"] == {"node-03": 2} and len(a.evidence["history"]["node-03"]) == 2
