"""`bench_pipeline`'s snapshot line: the worker's summed snapshot CPU as a cost per event and a share of its CPU."""

from __future__ import annotations

import pytest

from benchmarks.bench_pipeline import Drain, print_snapshots


def test_snapshot_cpu_becomes_a_cost_per_event_and_a_share_of_the_worker(capsys: pytest.CaptureFixture[str]) -> None:
    # 100,000 events at 50,000 per CPU-second is 2 CPU-s; 0.5 of them snapshotting is 5 us per event, a quarter
    print_snapshots(Drain(40_000.0, 50_000.0, 300.0, 4_140_000, 0.5), 100_000)
    out = capsys.readouterr().out
    assert "0.50 CPU-s in all, 5.00 us per event (about 25% of the worker's CPU" in out
    assert "largest task snapshot 4.1 MB" in out


def test_a_drain_without_snapshot_figures_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    print_snapshots(Drain(40_000.0, 50_000.0, 300.0, 0), 100_000)
    assert "state snapshots: no figure" in capsys.readouterr().out
