"""`bench_pipeline` without a broker: its arguments, and its snapshot line (summed CPU per event and as a share)."""

from __future__ import annotations

import pytest

from benchmarks.bench_pipeline import Drain, main, print_snapshots


def test_snapshot_cpu_becomes_a_cost_per_event_and_a_share_of_the_worker(capsys: pytest.CaptureFixture[str]) -> None:
    # 100,000 events at 50,000 per CPU-second is 2 CPU-s; 0.5 of them snapshotting is 5 us per event, a quarter
    print_snapshots(Drain(40_000.0, 50_000.0, 300.0, 4_140_000, 0.5), 100_000)
    out = capsys.readouterr().out
    assert "0.50 CPU-s in all, 5.00 us per event (about 25% of the worker's CPU" in out
    assert "largest task snapshot 4.1 MB" in out


def test_a_drain_without_snapshot_figures_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    print_snapshots(Drain(40_000.0, 50_000.0, 300.0, 0), 100_000)
    assert "state snapshots: no figure" in capsys.readouterr().out


@pytest.mark.parametrize("args", [["--nodes", "0"], ["--events", "-1"], ["--job-nodes", "-4"]])
def test_a_bad_size_stops_with_one_line_and_exit_code_2(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        main(args)  # refused before any broker is asked
    assert stop.value.code == 2
    assert "error: --events and --nodes must be positive, --job-nodes not negative" in capsys.readouterr().err
