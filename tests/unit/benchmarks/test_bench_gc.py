"""bench_gc drives the worker's real hot path and leaves the process's collector as it found it."""

from __future__ import annotations

import gc

import pytest

from benchmarks import bench_gc


def test_a_drain_processes_every_record_and_restores_the_collector() -> None:
    raw = bench_gc.encoded_mix(2, 3)
    assert len(raw) > 0 and len({r[0] for r in raw}) >= 2  # gpu samples and training records
    before = gc.get_threshold()
    for policy in (False, True):
        cpu, spent = bench_gc.drain(raw, policy=policy)
        assert cpu > 0 and 0 <= spent <= cpu
        assert gc.get_threshold() == before and gc.get_freeze_count() == 0


def test_a_small_run_prints_both_modes_per_fleet_size(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench_gc.main(["--nodes", "2", "--seconds", "2", "--rounds", "1"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()[2:]]
    assert [(row[0], " ".join(row[2:-3])) for row in rows] == [("2", "defaults"), ("2", "worker policy")]
