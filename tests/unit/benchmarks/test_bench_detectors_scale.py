"""The scaling benchmark: the same mix at every fleet size, through the worker's own hot path, as the worker builds it."""

from __future__ import annotations

import gc
from collections import Counter

import pytest

from benchmarks import bench_detectors, bench_gc
from benchmarks.fleet_mix import events_per_node_s, fleet_second
from trainguard.schemas.records import Heartbeat, NodeGpuSample, RdmaSample, TrainingStep

MIX = (NodeGpuSample, RdmaSample, TrainingStep, Heartbeat)


def test_the_fleet_splits_into_equal_jobs_with_ranks_numbered_within_each() -> None:
    records = [r for s in range(10) for r in fleet_second(10, 1000.0 + s, s, rdma=True, job_nodes=4)]
    jobs = Counter(r.node for r in records if isinstance(r, NodeGpuSample))
    assert len(jobs) == 10 and set(jobs.values()) == {10}
    by_job: dict[str, set[str]] = {}
    for r in records:
        assert isinstance(r, MIX)
        by_job.setdefault(r.job, set()).add(r.node)
    assert sorted(len(n) for n in by_job.values()) == [2, 4, 4]  # the fewest jobs of at most 4; the last has the rest
    ranks: dict[str, set[int]] = {j: set() for j in by_job}
    for r in records:
        if isinstance(r, TrainingStep):
            ranks[r.job].add(r.rank)
    assert all(min(rs) == 0 and len(rs) == 8 * len(by_job[j]) for j, rs in ranks.items())
    assert sum(isinstance(r, RdmaSample) for r in records) == 100
    assert sum(isinstance(r, Heartbeat) for r in records) == 10 * 8 * 2  # one per rank every 5 s
    assert len(records) == pytest.approx(10 * 10 * events_per_node_s(rdma=True))
    hundred_k = Counter(r.job for r in fleet_second(12_500, 1.0, 0, job_nodes=4096) if isinstance(r, NodeGpuSample))
    assert sorted(hundred_k.values()) == [3125] * 4  # 100,000 GPUs: four jobs of 25,000 ranks


def test_one_job_without_job_nodes_and_no_rdma_is_the_old_mix() -> None:
    records = list(fleet_second(3, 1.0, 0))
    assert {r.job for r in records if isinstance(r, MIX)} == {"bench"} and all(isinstance(r, MIX) for r in records)
    assert not any(isinstance(r, RdmaSample) for r in records)
    assert {r.rank for r in records if isinstance(r, TrainingStep)} == {0, 10, 20}


def test_the_hot_loop_like_the_worker_estimates_host_clocks() -> None:
    assert bench_gc.hot_loop().task(0).processor.skew is None
    assert bench_gc.hot_loop(like_worker=True).task(0).processor.skew is not None


def test_a_scale_run_times_the_asked_events_after_the_warm_up_and_leaves_the_collector_alone() -> None:
    before = gc.get_threshold()
    run = bench_detectors.scale_run(4, 3000, 12, 2)
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0
    assert run.events >= 3000 and run.cpu_s > 0 and 0 <= run.gc_s <= run.cpu_s
    assert run.entries > 4 * 8  # every rank and GPU of the fleet is known after the warm-up
    assert run.gpus == 32 and run.us_per_event > 0
    assert run.snapshot_s > 0 and run.snapshot_bytes > 1000  # the task's snapshot, as a commit writes it


def test_the_sweep_prints_a_row_per_size_with_the_ratio_to_512(capsys: pytest.CaptureFixture[str]) -> None:
    runs = [bench_detectors.ScaleRun(512, 100, 1.0, 0.0, 1 << 20, 10, 0.0145, 3 << 19),
            bench_detectors.ScaleRun(4096, 100, 1.5, 0.0, 1 << 20, 10, 0.21, 1 << 21)]
    for run in runs:
        bench_detectors.print_scale_row(run, runs)
    rows = [line.split() for line in capsys.readouterr().out.splitlines()]
    assert [(row[0], row[4]) for row in rows] == [("512", "1.00"), ("4,096", "1.50")]
    assert [(row[8], row[9]) for row in rows] == [("14", "1.50"), ("210", "2.00")]  # snapshot ms and MiB


def test_rounds_alternate_the_sizes_and_end_with_each_sizes_median(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench_detectors.main(["--scale", "2,3", "--events", "500", "--warm-s", "1", "--job-nodes", "2",
                                 "--rounds", "3"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("interpreter: ")  # which Python gave the figures (benchmarks/interpreter.py)
    assert [line.split()[0] for line in lines[3:9]] == ["2", "3"] * 3
    assert lines[9].startswith("median of 3 rounds") and [line.split()[0] for line in lines[10:]] == ["2", "3"]


def test_the_median_run_is_the_middle_cost() -> None:
    runs = [bench_detectors.ScaleRun(512, 100, cpu, 0.0, 0, 0) for cpu in (3.0, 1.0, 2.0)]
    assert bench_detectors._median_run(runs).cpu_s == 2.0


@pytest.mark.parametrize("args", [["--scale", "64,x"], ["--scale", "0"], ["--scale", "64", "--events", "0"],
                                  ["--scale", "64", "--rounds", "0"]])
def test_bad_sizes_exit_2_with_one_line(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        bench_detectors.main(args)
    assert exit_.value.code == 2
    assert "Traceback" not in capsys.readouterr().err
