"""Detection quality on simulated fleets (the *tuning* scenarios), scored by the backtest.

These run the project's telemetry simulator and the default pipeline with no
broker. The evaluation scenarios are deliberately not used here.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from trainguard.cli.commands.simulate import simulate_to
from trainguard.detectors.pipeline import DetectionPipeline
from trainguard.detectors.settings import DetectorSettings
from trainguard.lab.backtest.runner import run_backtest
from trainguard.lab.backtest.scoring import score

TUNING = Path(__file__).resolve().parents[3] / "scenarios" / "tuning"


@pytest.mark.parametrize("name", ["hang", "numerics", "hw", "network", "user-error"])
def test_tuning_scenario_is_found_precisely(name: str, tmp_path: Path) -> None:
    import json

    recording = tmp_path / f"{name}.jsonl"
    simulate_to(TUNING / f"{name}.yaml", recording)
    labels = json.loads(recording.with_name(recording.name + ".labels.json").read_text())
    result = run_backtest(recording, DetectionPipeline.from_settings(DetectorSettings()), drain_s=120.0)
    per_kind = score(labels, result.incidents).per_kind()
    for kind in {lab["kind"] for lab in labels}:
        assert per_kind[kind]["recall"] == 1.0, (kind, per_kind[kind])
    for kind, figures in per_kind.items():
        assert figures["precision"] in (None, 1.0), (kind, figures)
