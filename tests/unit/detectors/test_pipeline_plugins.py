"""Config decides which detectors run; plug-ins are found; the commands tell the truth."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainguard.cli import main
from trainguard.detectors.pipeline import DetectionPipeline
from trainguard.detectors.registry import build
from trainguard.detectors.settings import DEFAULT_TYPES, DetectorSettings
from trainguard.detectors.slowdown import SlowdownDetector
from trainguard.detectors.synthetic import Fleet
from trainguard.settings import load_settings


def test_defaults_build_every_builtin_kind() -> None:
    pipeline = DetectionPipeline.from_settings(DetectorSettings())
    assert [d.instance for d in pipeline.detectors] == list(DEFAULT_TYPES)


def test_one_type_many_instances_and_the_plugin_from_config() -> None:
    settings = load_settings(None, detectors={"instances": [
        {"type": "slowdown", "name": "slow-strict", "params": {"min_rel": 0.03}},
        {"type": "slowdown", "name": "slow-lax", "params": {"min_rel": 0.2}},
        {"type": "sample_long_step", "params": {"limit_s": 1.0}},
        {"type": "nan", "enabled": False},
    ]})
    pipeline = DetectionPipeline.from_settings(settings.detectors)
    names = [d.instance for d in pipeline.detectors]
    assert names == ["slow-strict", "slow-lax", "sample_long_step"]
    strict, lax = pipeline.detectors[:2]
    assert isinstance(strict, SlowdownDetector) and strict.min_rel == 0.03 and lax.min_rel == 0.2  # type: ignore
    found = [a for r in Fleet().steps(3) for a in pipeline.process(r)[0]]
    assert {a.detector for a in found} == {"sample_long_step"}


def test_bad_parameters_name_the_instance() -> None:
    with pytest.raises(TypeError, match="'fast' .*bad parameters"):
        build("hang", "fast", {"no_such_knob": 1})


def test_detectors_list_shows_builtins_and_plugin(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["detectors", "list"]) == 0
    out = capsys.readouterr().out
    for name in (*DEFAULT_TYPES, "node_health", "sample_long_step"):
        assert name in out
    assert "sample_detector:LongStepDetector" in out


def test_detectors_train_writes_a_loadable_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from trainguard.streams.recording import write_recording

    fleet = Fleet(seed=2)
    records = []
    for _ in range(40):
        fleet.ts += 10
        records += fleet.samples()
    recording = tmp_path / "fleet.jsonl"
    write_recording(recording, records)
    model = tmp_path / "health.model"
    assert main(["detectors", "train", str(recording), "--out", str(model), "--trees", "10"]) == 0
    assert "160 node samples" in capsys.readouterr().out
    pipeline = DetectionPipeline.from_settings(load_settings(None, detectors={"instances": [
        {"type": "node_health", "params": {"model_path": str(model)}}]}).detectors)
    assert pipeline.detectors[0].state_size() == 0
    assert main(["detectors", "train", str(tmp_path / "missing.jsonl"), "--out", str(model)]) == 2
