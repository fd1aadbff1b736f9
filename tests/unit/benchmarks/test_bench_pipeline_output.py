"""`bench_pipeline` without a broker: its arguments, its snapshot line (summed CPU per event and as a share), and
the rounds' summary (each ratio taken within its round)."""

from __future__ import annotations

import pytest

from benchmarks.bench_pipeline import Drain, main, median_drain, print_rounds, print_snapshots, round_ratios


def test_snapshot_cpu_becomes_a_cost_per_event_and_a_share_of_the_worker(capsys: pytest.CaptureFixture[str]) -> None:
    # 100,000 events at 50,000 per CPU-second is 2 CPU-s; 0.5 of them snapshotting is 5 us per event, a quarter
    print_snapshots(Drain(40_000.0, 50_000.0, 300.0, 4_140_000, 0.5), 100_000)
    out = capsys.readouterr().out
    assert "0.50 CPU-s in all, 5.00 us per event (about 25% of the worker's CPU" in out
    assert "largest task snapshot 4.1 MB" in out


def test_a_drain_without_snapshot_figures_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    print_snapshots(Drain(40_000.0, 50_000.0, 300.0, 0), 100_000)
    assert "state snapshots: no figure" in capsys.readouterr().out


@pytest.mark.parametrize("args", [["--nodes", "0"], ["--events", "-1"], ["--job-nodes", "-4"], ["--rounds", "0"]])
def test_a_bad_size_stops_with_one_line_and_exit_code_2(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        main(args)  # refused before any broker is asked
    assert stop.value.code == 2
    assert "error: --events, --nodes and --rounds must be positive, --job-nodes not negative" in capsys.readouterr().err


def test_each_ratio_is_taken_within_its_round_and_a_missing_floor_is_left_out() -> None:
    rounds = [({"decode only": 400.0, "confluent-kafka + decode": 200.0}, 100.0),
              ({"decode only": 200.0, "confluent-kafka + decode": None}, 80.0)]
    # Across rounds the worker's median (90) over the floors' medians (300, 200) would say 0.30x and 0.45x.
    assert round_ratios(rounds) == {"decode only": [0.25, 0.4], "confluent-kafka + decode": [0.5]}


def test_the_rounds_summary_prints_each_floors_median_ratio_with_its_range(capsys: pytest.CaptureFixture[str]) -> None:
    floors = {"confluent-kafka + decode": 100.0}
    print_rounds([(floors, 30.0), ({"confluent-kafka + decode": 200.0}, 100.0), (floors, 45.0)])
    out = capsys.readouterr().out
    assert "over 3 rounds" in out and "median 45 events/CPU-s (range 30 - 100)" in out
    assert "against confluent-kafka + decode: median 0.45x (range 0.30 - 0.50x, 3 rounds)" in out


def test_the_figures_after_the_rounds_are_one_real_drain_the_median_one() -> None:
    slow, mid, fast = (Drain(10.0, 100.0, 1.0, 1), Drain(30.0, 200.0, 2.0, 2), Drain(20.0, 300.0, 3.0, 3))
    assert median_drain([fast, slow, mid]) is mid  # not a blend: its wall rate and snapshot go with its CPU rate
    assert median_drain([fast, slow]) is slow and median_drain([mid]) is mid
