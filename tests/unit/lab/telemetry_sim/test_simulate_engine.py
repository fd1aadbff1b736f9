"""The simulator's output: ordered, deterministic, and carrying each fault's real signature."""

from __future__ import annotations

import math
import statistics
from typing import Any

import pytest

from trainguard.lab.telemetry_sim import run_scenario
from trainguard.lab.telemetry_sim.scenario import parse_scenario
from trainguard.schemas.records import (
    CheckpointEvent,
    Heartbeat,
    JobTopology,
    LogEvent,
    NodeGpuSample,
    PhaseChange,
    RdmaSample,
    Record,
    StackSample,
    TrainingStep,
)

T0 = 1_767_225_600.0


def simulate(faults: list[dict[str, Any]], **overrides: Any) -> tuple[list[Record], list[dict[str, Any]]]:
    data: dict[str, Any] = {"name": "t", "seed": 5, "duration_s": 1800,
                            "job": {"nodes": 4, "gpus_per_node": 4, "tp": 2, "pp": 2, "step_time_s": 5.0,
                                    "checkpoint_every_s": 600, "checkpoint_pause_s": 30},
                            "faults": faults}
    data.update(overrides)
    events, labels = run_scenario(parse_scenario(data))
    return list(events), labels


def of(records: list[Record], cls: type, lo: float = 0.0, hi: float = 1e9) -> list[Any]:
    return [r for r in records if isinstance(r, cls) and T0 + lo <= r.ts < T0 + hi]


def test_records_are_time_ordered_deterministic_and_cover_every_stream() -> None:
    first, labels = simulate([])
    again, _ = simulate([])
    assert first == again and labels == []
    assert all(a.ts <= b.ts for a, b in zip(first, first[1:]))
    kinds = {type(r) for r in first}
    assert {TrainingStep, Heartbeat, NodeGpuSample, RdmaSample, PhaseChange, CheckpointEvent, JobTopology} <= kinds
    topo = of(first, JobTopology)[0]
    assert (topo.world_size, topo.tp, topo.pp, topo.dp) == (16, 2, 2, 4)
    assert len(topo.rank_nodes) == 16


def test_checksums_agree_across_dp_replicas_and_loss_decays() -> None:
    records, _ = simulate([])
    steps = of(records, TrainingStep)
    by_step: dict[tuple[int, int, int], set[str | None]] = {}
    for s in steps:
        by_step.setdefault((s.step, s.tp, s.pp), set()).add(s.checksum)
    assert all(len(v) == 1 for v in by_step.values())
    early = statistics.mean(s.loss for s in steps if s.step < 20)
    late = statistics.mean(s.loss for s in steps if s.step > 250)
    assert late < early


def test_checkpoint_pauses_are_announced_and_stop_steps() -> None:
    records, _ = simulate([])
    phases = [(p.ts - T0, p.phase) for p in of(records, PhaseChange)]
    start = next(t for t, ph in phases if ph == "checkpointing")
    end = next(t for t, ph in phases if ph == "training" and t > start)
    assert 600 <= start < 610 and end - start == pytest.approx(30.0)
    assert not of(records, TrainingStep, start + 0.1, end)
    assert [c.status for c in of(records, CheckpointEvent)][:2] == ["started", "saved"]


def test_hang_stops_steps_keeps_heartbeats_collapses_rdma_and_stacks_name_the_culprit() -> None:
    records, labels = simulate([{"kind": "hang", "at_s": 700, "rank": 9, "variant": "dataloader"}])
    (label,) = labels
    assert label["ranks"] == [9] and label["nodes"] == ["gpu-node-002"]
    assert not of(records, TrainingStep, 700, 1000)
    assert of(records, Heartbeat, 700, 1000)
    rates = [p.tx_bps for s in of(records, RdmaSample, 710, 1000) for p in s.ports]
    assert max(rates) < 1e6 < min(p.tx_bps for s in of(records, RdmaSample, 300, 500) for p in s.ports)
    stacks = of(records, StackSample, 700, 1000)
    assert {s.rank for s in stacks} == set(range(16))
    odd = {s.rank for s in stacks if "all_reduce" not in " ".join(s.frames)}
    assert odd == {9}
    after = of(records, TrainingStep, 1000)
    assert after and after[0].attempt == 1 and after[0].step <= 120  # resumed from the checkpoint at ~600 s


def test_slowdown_raises_culprit_compute_and_everyones_step_time() -> None:
    records, labels = simulate([{"kind": "slowdown", "at_s": 700, "node": 1, "magnitude": 0.2,
                                 "variant": "thermal"}])
    assert labels[0]["ranks"] == [4, 5, 6, 7]
    before, during = of(records, TrainingStep, 300, 590), of(records, TrainingStep, 710, 1290)
    mfu_drop = 1 - statistics.median(s.mfu for s in during) / statistics.median(s.mfu for s in before)
    assert mfu_drop == pytest.approx(0.2, abs=0.03)  # magnitude is the job's throughput loss
    slow = statistics.median(s.compute_time_s for s in during if s.node == "gpu-node-001")
    fast = statistics.median(s.compute_time_s for s in during if s.node != "gpu-node-001")
    assert slow / fast == pytest.approx((1 / 0.8 - 0.15) / 0.85, rel=0.03)
    hot = [g for s in of(records, NodeGpuSample, 710, 1290) if s.node == "gpu-node-001" for g in s.gpus]
    assert all(g.throttle_reasons and g.sm_clock_mhz < 1800 for g in hot)


def test_sdc_diverges_one_replica_from_its_first_step() -> None:
    records, labels = simulate([{"kind": "sdc", "at_s": 700, "rank": 5}])
    during = of(records, TrainingStep, 700, 1000)
    first = min(s.step for s in during)
    for step in {s.step for s in during}:
        peers = [s for s in during if s.step == step and (s.tp, s.pp) == (1, 0)]
        odd = [s.rank for s in peers if s.checksum != peers[0 if peers[0].rank != 5 else 1].checksum]
        assert odd == [5], (step, first)
    assert labels[0]["ranks"] == [5]


def test_nan_is_reported_first_by_the_labelled_rank() -> None:
    records, labels = simulate([{"kind": "nan", "at_s": 700, "rank": 11, "variant": "loss"}])
    bad = [s for s in of(records, TrainingStep, 700) if math.isnan(s.loss)]
    assert bad[0].rank == 11 == labels[0]["ranks"][0]


def test_hw_fault_xid_appears_in_the_next_sample_and_benign_xids_are_not_labelled() -> None:
    records, labels = simulate([{"kind": "hw_fault", "at_s": 700, "node": 2, "gpu": 3, "variant": "xid",
                                 "code": 79}], background={"benign_xids_per_node_h": 20})
    xids = [(s.node, x.gpu, x.code, s.ts - T0) for s in of(records, NodeGpuSample) for x in s.xids]
    assert ("gpu-node-002", 3, 79) in {x[:3] for x in xids}
    hit = next(x for x in xids if x[2] == 79)
    assert 700 <= hit[3] <= 710
    assert {x[2] for x in xids} - {79} <= {13, 31, 43} and len(xids) > 5
    assert [lab["kind"] for lab in labels] == ["hw_fault"]
    assert any(isinstance(r, LogEvent) and "NCCL" in r.message for r in of(records, LogEvent, 700, 720))


def test_user_error_is_a_traceback_after_a_code_version_change() -> None:
    records, labels = simulate([{"kind": "user_error", "at_s": 700, "variant": "import_error"}])
    logs = [r for r in of(records, LogEvent, 700) if r.category == "traceback"]
    assert logs and all("ImportError" in r.message and r.exit_code == 1 for r in logs)
    versions = {s.code_version for s in of(records, TrainingStep, 900)}
    assert versions == {"v1"}  # rolled back once the fault ends
    assert labels[0]["nodes"] == [] and labels[0]["kind"] == "user_error"


def test_overlapping_explicit_faults_are_refused() -> None:
    from trainguard.lab.telemetry_sim.scenario import ScenarioError

    with pytest.raises(ScenarioError, match="overlaps"):
        simulate([{"kind": "hang", "at_s": 700}, {"kind": "nan", "at_s": 800}])


def test_oom_after_a_config_change_runs_a_few_steps_on_the_new_code_version() -> None:
    records, _ = simulate([{"kind": "user_error", "at_s": 700, "variant": "oom"}])
    steps = of(records, TrainingStep, 700, 900)
    assert {s.code_version for s in steps} == {"v1+oom"} and {s.attempt for s in steps} == {1}
    oom = [r for r in of(records, LogEvent, 700) if r.category == "traceback"]
    assert oom and oom[0].ts > max(s.ts for s in steps) and "OutOfMemoryError" in oom[0].message


def test_latency_budget_allows_for_a_pause_the_fault_starts_in() -> None:
    _, in_pause = simulate([{"kind": "sdc", "at_s": 605}])
    _, outside = simulate([{"kind": "sdc", "at_s": 700}])
    assert outside[0]["latency_budget_s"] == pytest.approx(5.0 * 1.5 + 1.0)
    assert in_pause[0]["latency_budget_s"] == pytest.approx(5.0 * 1.5 + 1.0 + 30.0 + 7.5)


def test_remap_failure_sets_the_flag_until_the_gpu_is_replaced() -> None:
    records, labels = simulate([{"kind": "hw_fault", "at_s": 700, "node": 0, "gpu": 1, "variant": "remap_failed",
                                 "duration_s": 200}])
    flags = [(s.ts - T0, s.gpus[1].remap_failed) for s in of(records, NodeGpuSample) if s.node == "gpu-node-000"]
    assert all(flag == (700 <= t < 900) for t, flag in flags if t < 700 or 712 <= t)
    assert any(x.code == 64 for s in of(records, NodeGpuSample, 700, 712) for x in s.xids)
    assert labels[0]["gpu"] == 1 and labels[0]["ranks"] == []
