"""`trainguard ettr-sim` over the real InfiniteHBD trace (read-only, shipped beside the repo)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainguard.cli import main
from trainguard.cli.commands.ettr_sim import DEFAULT_TRACE


def test_runs_on_the_real_trace_and_is_deterministic(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert DEFAULT_TRACE.is_dir(), f"the InfiniteHBD trace is expected at {DEFAULT_TRACE}"
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
