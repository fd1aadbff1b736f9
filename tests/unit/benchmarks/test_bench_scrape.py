"""bench_scrape compares like with like: its rebuilt "before" exports the worker's series, names and labels."""

from __future__ import annotations

import pytest
from prometheus_client import generate_latest

from benchmarks import bench_scrape
from trainguard.schemas.topics import Topics
from trainguard.streams.worker.metrics import StateCensus, WorkerMetrics
from trainguard.streams.worker.processor import ProcessorStats


def test_the_rebuilt_before_exports_exactly_the_series_the_worker_does() -> None:
    pipeline, fed = bench_scrape.fed_pipeline(4, 2)
    assert fed > 0
    stats = ProcessorStats(by_topic={"gpu": fed})
    census = StateCensus()
    census.count(0, pipeline.detectors)
    now = bench_scrape._with_positions(WorkerMetrics(stats=stats, census=census), Topics(), 3)  # noqa: SLF001
    before = generate_latest(bench_scrape.legacy_registry(stats, pipeline.detectors, 3))
    keys = bench_scrape._series_keys(now.render())  # noqa: SLF001
    assert keys == bench_scrape._series_keys(before)  # noqa: SLF001
    assert b'trainguard_worker_consumer_lag{partition="2",topic="rdma"}' in keys
    assert any(k.startswith(b"trainguard_worker_detector_state_entries{") for k in keys)


def test_a_small_run_prints_a_row_per_fleet_size(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench_scrape.main(["--nodes", "2,4", "--seconds", "1", "--repeat", "2", "--partitions", "2"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()[2:]]
    assert [row[0] for row in rows] == ["2", "4"]


def test_bad_node_counts_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        bench_scrape.main(["--nodes", "64,many"])
    assert exit_.value.code == 2 and "--nodes" in capsys.readouterr().err
