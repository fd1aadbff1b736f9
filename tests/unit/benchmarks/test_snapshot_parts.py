"""The snapshot taken apart: parts, leaves, and the share of the bytes one commit interval changes."""

from __future__ import annotations

import pytest

from benchmarks import bench_detectors
from benchmarks.snapshot_parts import MIN_SPLIT, changed, digests, leaves, measure
from trainguard.detectors.common import Bounded, Snapshottable, rank_map


class _Job(Snapshottable):
    __slots__ = ("step", "rank_step")

    def __init__(self) -> None:
        self.step = 0
        self.rank_step: Bounded[int, int] = rank_map()


def test_a_big_map_splits_into_one_leaf_per_entry_and_a_small_plain_one_stays_whole() -> None:
    big = {f"n{i}": i for i in range(MIN_SPLIT)}
    assert [path for path, _ in leaves(big)] == [(f"n{i}",) for i in range(MIN_SPLIT)]
    assert [path for path, _ in leaves({"a": 1})] == [()]


def test_a_job_record_splits_into_its_fields_and_its_per_rank_map_into_ranks() -> None:
    job = _Job()
    for rank in range(100):
        job.rank_step[rank] = 1
    paths = [path for path, _ in leaves({"job-a": job})]  # one job: a small map, but it holds a per-rank map
    assert ("job-a", "step") in paths and ("job-a", "rank_step", 99) in paths and len(paths) == 101


def test_packed_rows_are_keyed_by_their_first_field() -> None:
    rows = [(f"host{i}", (0.1, 0.2), 3) for i in range(MIN_SPLIT)]
    holder = {"hosts": rows, "other": {f"k{i}": i for i in range(MIN_SPLIT)}}
    assert ("hosts", "host3") in dict(leaves(holder))


def test_changed_counts_the_bytes_of_new_and_different_leaves_only() -> None:
    job = _Job()
    for rank in range(100):
        job.rank_step[rank] = 1
    before = digests({"j": job})
    job.rank_step[5] = 2  # one rank stepped
    job.rank_step[100] = 1  # one rank joined
    after = digests({"j": job})
    one_rank = after[("j", "rank_step", 5)][1]
    assert changed(before, after) == one_rank + after[("j", "rank_step", 100)][1]
    assert changed(after, after) == 0


def test_measure_sizes_the_part_and_its_leaves() -> None:
    part, found = measure("hang._jobs", {f"n{i}": i for i in range(MIN_SPLIT)})
    assert part.name == "hang._jobs" and part.size > 0 and part.leaves == MIN_SPLIT == len(found)
    assert part.leaf_bytes >= part.size / 2 and part.changed_share == 0.0


def test_a_scale_run_with_a_commit_interval_takes_the_task_snapshot_apart(capsys: pytest.CaptureFixture[str]) -> None:
    run = bench_detectors.scale_run(4, 2000, 12, 2, commit_s=5.0)
    names = {p.name for p in run.parts}
    assert {"hang._jobs", "network._ports", "host clock estimates", "partition clocks"} <= names
    by_name = {p.name: p for p in run.parts}
    assert by_name["network._ports"].leaves == 1  # 4 nodes' rows of 8 ports: too few to split
    assert 0 < by_name["hang._jobs"].changed_share <= 1  # ranks stepped and beat in five seconds
    assert by_name["host clock estimates"].changed_share == 1.0  # every host's window took a new difference
    bench_detectors.print_parts(run)
    assert "an incremental snapshot would write" in capsys.readouterr().out


def test_a_negative_commit_interval_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        bench_detectors.main(["--scale", "4", "--snapshot-parts", "-1"])
    assert exit_.value.code == 2
    assert "--snapshot-parts" in capsys.readouterr().err
