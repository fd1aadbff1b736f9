"""The messy fleet: several jobs with churn, idle nodes, skewed clocks, late delivery, jobless hardware,
per-rank phases, checkpoint styles, new fault shapes. Each property is checked on the generated records."""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

import pytest

from trainguard.lab.telemetry_sim import run_scenario
from trainguard.lab.telemetry_sim.scenario import ScenarioError, parse_scenario
from trainguard.schemas.records import (
    CheckpointEvent,
    LogEvent,
    NodeGpuSample,
    PhaseChange,
    RdmaSample,
    Record,
    TrainingStep,
)

T0 = 1_767_225_600.0
JOB = {"nodes": 2, "gpus_per_node": 4, "tp": 2, "pp": 2, "step_time_s": 5.0, "checkpoint_every_s": 600,
       "checkpoint_pause_s": 30}


def simulate(**data: Any) -> tuple[list[Record], list[dict[str, Any]]]:
    base: dict[str, Any] = {"name": "f", "seed": 3, "duration_s": 2400, "job": {"name": "a", **JOB}}
    base.update(data)
    events, labels = run_scenario(parse_scenario(base))
    return list(events), labels


def test_two_jobs_idle_nodes_and_churn_share_one_fleet() -> None:
    records, _ = simulate(jobs=[{"name": "b", **JOB, "end_s": 1200}, {"name": "c", **JOB, "first_node": 2,
                                                                       "start_s": 1300}],
                          fleet={"idle_nodes": 1})
    steps = defaultdict(set)
    for r in records:
        if isinstance(r, TrainingStep):
            steps[r.job].add(r.node)
    assert steps == {"a": {"gpu-node-000", "gpu-node-001"}, "b": {"gpu-node-002", "gpu-node-003"},
                     "c": {"gpu-node-002", "gpu-node-003"}}
    b_last = max(r.ts for r in records if isinstance(r, TrainingStep) and r.job == "b")
    c_first = min(r.ts for r in records if isinstance(r, TrainingStep) and r.job == "c")
    assert b_last < T0 + 1200 < T0 + 1300 <= c_first
    between = [r for r in records if isinstance(r, NodeGpuSample) and r.node == "gpu-node-002"
               and T0 + 1210 < r.ts < T0 + 1290]
    assert between and all(r.job == "" for r in between)  # a freed node idles, in no job
    idle = [r for r in records if isinstance(r, NodeGpuSample) and r.node == "idle-node-000"]
    assert idle and all(r.job == "" and max(g.util_pct for g in r.gpus) < 10 for r in idle)
    ends = [r for r in records if isinstance(r, LogEvent) and r.job == "b" and r.exit_code == 0]
    assert len(ends) == 2  # job b completed: each node's processes exited cleanly


def test_jobs_sharing_nodes_at_once_are_refused() -> None:
    with pytest.raises(ScenarioError, match="share nodes"):
        parse_scenario({"name": "x", "duration_s": 60, "job": JOB, "jobs": [{"name": "b", **JOB, "first_node": 1}]})


def test_host_clocks_are_skewed_within_the_bound_and_hardware_loses_its_job() -> None:
    plain, _ = simulate()
    messy, _ = simulate(fleet={"clock_skew_s": 2.0, "jobless_hardware": True})
    def first_gpu(records: list[Record], node: str) -> float:
        return next(r.ts for r in records if isinstance(r, NodeGpuSample) and r.node == node)
    offsets = [first_gpu(messy, n) - first_gpu(plain, n) for n in ("gpu-node-000", "gpu-node-001")]
    assert all(abs(o) <= 2.0 for o in offsets) and offsets[0] != offsets[1]
    assert all(r.job == "" for r in messy if isinstance(r, (NodeGpuSample, RdmaSample)))
    assert any(r.job == "a" for r in plain if isinstance(r, NodeGpuSample))


def test_delivery_jitter_reorders_hosts_but_keeps_each_hosts_order() -> None:
    records, _ = simulate(fleet={"delivery_jitter_s": 2.0})
    stamps = [r.ts for r in records]
    assert any(b < a for a, b in zip(stamps, stamps[1:]))  # the stream is no longer in event-time order
    per_host = defaultdict(list)
    for r in records:
        if getattr(r, "node", ""):
            per_host[r.node].append(r.ts)  # type: ignore[attr-defined]
    assert all(all(a <= b + 0.1 for a, b in zip(ts, ts[1:])) for ts in per_host.values())


def test_every_rank_announces_its_phases_spread_by_pipeline_stage() -> None:
    records, _ = simulate(fleet={"per_rank_phases": True, "phase_spread_s": 1.5})
    ckpt = [r for r in records if isinstance(r, PhaseChange) and r.phase == "checkpointing" and r.ts < T0 + 700]
    assert sorted(r.rank for r in ckpt) == list(range(8))
    by_stage = defaultdict(list)
    for r in ckpt:
        by_stage[(r.rank // 2) // 2].append(r.ts)  # tp=2, dp=2: pp stage of a rank
    assert min(by_stage[1]) - min(by_stage[0]) > 1.0  # the later stage reaches the pause later


def test_async_checkpoints_overlap_steps_and_megatron_announces_three_phases_at_once() -> None:
    records, _ = simulate(job={"name": "a", **JOB, "checkpoint_styles": ["async"]})
    started = [r for r in records if isinstance(r, CheckpointEvent) and r.status == "started"][0]
    saved = [r for r in records if isinstance(r, CheckpointEvent) and r.status == "saved"][0]
    during = [r for r in records if isinstance(r, TrainingStep) and started.ts < r.ts < saved.ts]
    assert during  # steps run while the save is in progress
    records, _ = simulate(job={"name": "a", **JOB, "checkpoint_styles": ["megatron"], "eval_pause_s": 20})
    first = [r for r in records if isinstance(r, PhaseChange) and T0 + 590 < r.ts < T0 + 700]
    assert [r.phase for r in first][:3] == ["checkpointing", "training", "eval"]
    assert first[2].ts - first[0].ts < 0.01


def test_spinning_and_idle_hangs_and_a_gradual_decline() -> None:
    records, labels = simulate(faults=[{"kind": "hang", "at_s": 700, "variant": "collective"},
                                       {"kind": "hang", "at_s": 1300, "variant": "dataloader"}])
    def util(lo: float, hi: float) -> float:
        vals = [g.util_pct for r in records if isinstance(r, NodeGpuSample) and T0 + lo < r.ts < T0 + hi
                for g in r.gpus]
        return sum(vals) / len(vals)
    assert util(760, 900) > 95 and util(1360, 1500) < 5
    records, labels = simulate(faults=[{"kind": "slowdown", "at_s": 100, "variant": "gradual",
                                        "magnitude": 0.2, "duration_s": 2000}])
    assert labels[0]["nodes"] == [] and labels[0]["ranks"] == []
    assert labels[0]["latency_budget_s"] == pytest.approx(2000 * 0.5 + 900)
    times = [(r.ts, r.step_time_s) for r in records if isinstance(r, TrainingStep) and r.rank == 0]
    early = [v for t, v in times if t < T0 + 300]
    late = [v for t, v in times if T0 + 1900 < t < T0 + 2100]
    assert sum(late) / len(late) > 1.15 * sum(early) / len(early)


def test_nan_starts_on_its_origin_only_and_torchrun_prefixes_tracebacks() -> None:
    records, labels = simulate(faults=[{"kind": "nan", "at_s": 700, "variant": "grad", "rank": 5},
                                       {"kind": "user_error", "at_s": 1300, "variant": "shape_mismatch"}],
                               fleet={"torchrun_prefix": True})
    bad = [r for r in records if isinstance(r, TrainingStep)
           and not all(math.isfinite(v) for v in (r.loss, r.grad_norm) if v is not None)]
    first_step = min(r.step for r in bad)
    assert [r.rank for r in bad if r.step == first_step] == [5]
    tb = [r for r in records if isinstance(r, LogEvent) and "mat1 and mat2" in r.message]
    assert tb and all(line.startswith(f"[rank{tb[0].rank}]:") for line in tb[0].message.split("\n"))


def test_nvml_timeouts_and_degraded_links() -> None:
    records, labels = simulate(faults=[{"kind": "hw_fault", "at_s": 700, "variant": "nvml_timeout", "node": 1},
                                       {"kind": "network", "at_s": 1300, "variant": "degraded", "node": 0,
                                        "gpu": 2, "magnitude": 0.25}])
    hung = [r for r in records if isinstance(r, NodeGpuSample) and not r.nvml_ok]
    assert hung and all(r.node == "gpu-node-001" and "timed out" in r.error for r in hung)
    slow = [r for r in records if isinstance(r, RdmaSample) and r.node == "gpu-node-000" and T0 + 1320 < r.ts < T0 + 1500]
    assert slow
    for r in slow:
        rates = [p.tx_bps for p in r.ports]
        assert rates[2] < 0.4 * max(rates) and r.ports[2].symbol_errors == slow[0].ports[2].symbol_errors
