"""`bench_scaleout` against the real broker: a small drain, progress from committed offsets, cores stated.

It asserts what the harness reports, not how fast anything is (figures come
from benchmark runs, never from timed assertions).
"""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks import bench_scaleout, cores
from benchmarks.interpreter import describe


def test_a_small_drain_counts_every_event_and_says_which_counts_had_no_cores(kafka: str, tmp_path: Path) -> None:
    out = tmp_path / "scale.json"
    assert bench_scaleout.main(["--workers", "1", "8", "--events-per-worker", "20000", "--nodes", "64",
                                "--no-takeover", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["interpreter"] == describe()  # which Python gave the figures travels with them
    have = len(cores.available())
    assert report["cores"] == have and report["shared_cores"] == cores.reserve_for(range(have), 8)
    measured = {r["workers"]: r for r in report["runs"]}
    one = measured[1]  # every machine with two cores can give one worker a core of its own
    assert one["dedicated"] and len(one["worker_cores"]) == 1
    assert 0 < one["events"] <= 20_000 + 200 and one["wall_s"] > 0 and one["cpu_s"] > 0
    if have >= 8 + report["shared_cores"]:
        assert measured[8]["dedicated"] and len(set(measured[8]["worker_cores"])) == 8
    else:
        assert 8 not in measured
        assert any(line.startswith("8 workers: not measured") for line in report["not_measured"])
