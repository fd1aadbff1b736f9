"""bench_compiled measures what it says it measures, and refuses a 'compiled' figure that was interpreted."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from benchmarks import bench_compiled
from benchmarks.bench_detectors import simulate
from trainguard.streams.recording import write_recording


def test_a_measurement_feeds_every_record_and_digests_what_was_found(tmp_path: Path) -> None:
    records = simulate(4, 1)
    records_file = tmp_path / "records.pickle"
    records_file.write_bytes(pickle.dumps(records))
    first = bench_compiled.measure(records_file, "", passes=1)
    again = bench_compiled.measure(records_file, "", passes=1)
    assert first["events"] == len(records) and first["us"] > 0
    assert first["compiled"] is False  # the installed tree is interpreted
    assert first["digest"] == again["digest"]  # the same records find the same things
    records_file.write_bytes(pickle.dumps(records[: len(records) // 2]))
    assert bench_compiled.measure(records_file, "", passes=1)["events"] == len(records) // 2


def test_a_compiled_run_that_loaded_nothing_compiled_stops_with_exit_code_2(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A copy mypyc never built (here: an empty directory) would time the interpreter twice."""
    monkeypatch.setattr(bench_compiled, "compile_copy", lambda into: tmp_path)
    assert bench_compiled.main(["--nodes", "4", "--minutes", "1", "--rounds", "1"]) == 2
    assert "did not load" in capsys.readouterr().err


def test_a_recording_is_fed_in_file_order_and_a_missing_one_is_named(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    records = simulate(4, 1)[:50]
    recording = tmp_path / "fleet.jsonl"
    write_recording(recording, records)
    with recording.open("a") as f:
        f.write("{not json\n")  # a bad line is left out, as the backtest leaves it
    assert bench_compiled.load(recording) == records
    assert bench_compiled.main(["--recording", str(tmp_path / "missing.jsonl")]) == 2
    assert "missing.jsonl: no such file" in capsys.readouterr().err
