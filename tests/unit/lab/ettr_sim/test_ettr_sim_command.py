"""`trainguard ettr-sim` over the real InfiniteHBD trace (read-only, shipped beside the repo)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainguard.cli import main
from trainguard.cli.commands.ettr_sim import default_trace


def test_runs_on_the_real_trace_and_is_deterministic(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert default_trace().is_dir(), f"the InfiniteHBD trace is expected at {default_trace()}"
    outs = []
    for name in ("a.json", "b.json"):
        assert main(["ettr-sim", "--nodes", "300", "--days", "30", "--seed", "3", "--json", str(tmp_path / name)]) == 0
        outs.append(json.loads((tmp_path / name).read_text()))
    assert outs[0] == outs[1]
    report = outs[0]
    assert report["job"] == {"nodes": 300, "gpus": 2400, "days": 30.0}
    assert report["incidents"] > 0
    ours, theirs = report["policies"]["trainguard"], report["policies"]["baseline"]
    assert theirs["ettr"] < ours["ettr"] < 1
    assert set(ours["unproductive_hours"]) == {"detection", "localisation", "failover", "recompute"}
    assert "ETTR" in capsys.readouterr().out


def test_missing_trace_is_one_clear_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ettr-sim", "--trace", str(tmp_path / "absent")]) == 2
    err = capsys.readouterr().err.strip()
    assert "--trace" in err and "not found" in err and "\n" not in err


def test_sweep_on_the_real_trace_writes_its_tables_json_and_plot(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    args = ["ettr-sim", "--sweep", "--sweep-nodes", "300", "--sweep-pools", "0,2", "--sweep-groups", "1,8",
            "--seeds", "2", "--days", "30", "--json", str(tmp_path / "s.json"), "--markdown", str(tmp_path / "s.md"),
            "--plot", str(tmp_path / "s.png")]
    assert main(args) == 0
    report = json.loads((tmp_path / "s.json").read_text())
    assert report["seeds"] == [0, 1]
    cells = {(p["pool"], p["group"]): p for p in report["points"]}
    assert set(cells) == {(0, 1), (0, 8), (6, 1), (6, 8)}
    assert cells[0, 8]["requeues"] > cells[6, 8]["requeues"]  # an empty pool requeues every eviction
    assert cells[6, 8]["over_evicted_per_day"] > 0 == cells[6, 1]["over_evicted_per_day"]
    assert "group of 8" in (tmp_path / "s.md").read_text() and (tmp_path / "s.png").stat().st_size > 0
    assert "best goodput" in capsys.readouterr().out


def test_a_bad_sweep_value_is_one_clear_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ettr-sim", "--sweep", "--seeds", "0"]) == 2
    assert capsys.readouterr().err.strip() == "trainguard ettr-sim: --seeds: must be >= 1 (got 0)"
    assert main(["ettr-sim", "--over-evict-nodes", "0"]) == 2
    assert "over_evict_nodes" in capsys.readouterr().err
