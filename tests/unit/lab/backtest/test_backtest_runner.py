"""The backtest loop, the recording format, the reports and the commands, end to end without Kafka."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from trainguard.cli import main
from trainguard.detectors.nan import NanDetector
from trainguard.detectors.pipeline import DetectionPipeline
from trainguard.lab.backtest.runner import run_backtest
from trainguard.schemas.records import Heartbeat, TrainingStep
from trainguard.streams.recording import RecordingError, parse_line, read_recording, write_recording

SCENARIO = """
name: cli-small
seed: 9
duration_s: 1500
job: {name: small, nodes: 2, gpus_per_node: 4, tp: 2, pp: 1, step_time_s: 5.0, checkpoint_every_s: 600}
faults:
  - {kind: nan, at_s: 300, rank: 6, variant: loss}
  - {kind: nan, at_s: 900, rank: 1, variant: grad}
"""


def steps(n: int, nan_at: int) -> list[TrainingStep]:
    return [TrainingStep(ts=float(i), job="j", rank=0, node="n0", step=i, loss="nan" if i == nan_at else 2.0)
            for i in range(1, n + 1)]


def test_recording_round_trip_and_bad_lines_named_by_number(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    records = [*steps(3, 99), Heartbeat(ts=4.0, job="j", rank=1, node="n1")]
    assert write_recording(path, records) == 4
    assert [e.value for e in read_recording(path)] == records
    first = json.loads(path.read_text().splitlines()[0])
    assert first["topic"] == "training" and first["key"] == "j" and first["value"]["type"] == "step"
    lines = path.read_text().splitlines()
    lines.insert(1, '{"topic": "training", "key": "j", "ts": 1, "value": {"type": "step", "ts": "x"}}')
    lines.insert(3, '{"topic": "gpu", "key": "j", "ts": 1, "value": {"type": "heartbeat", "ts": 1.0, '
                    '"job": "j", "rank": 0, "node": "n"}}')
    lines.insert(4, "not json")
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(RecordingError, match=r"r\.jsonl:2: invalid event"):
        list(read_recording(path))
    errors: list[RecordingError] = []
    assert len(list(read_recording(path, on_error=errors.append))) == 4
    assert [e.lineno for e in errors] == [2, 4, 5]
    assert "does not belong on topic 'gpu'" in str(errors[1])
    with pytest.raises(RecordingError, match="schema_version"):
        parse_line('{"topic":"training","key":"j","ts":1,"value":{"type":"heartbeat","ts":1.0,"job":"j",'
                   '"rank":0,"node":"n","schema_version":9}}')


def test_backtest_counts_bad_lines_and_writes_incidents(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    write_recording(path, steps(10, 5))
    with open(path, "a") as f:
        f.write("{broken\n")
    out = tmp_path / "inc.jsonl"
    with open(out, "wb") as f:
        result = run_backtest(path, DetectionPipeline([NanDetector()]), out=f)
    assert (result.events, result.bad_lines, len(result.incidents)) == (10, 1, 1)
    assert "r.jsonl:11: malformed JSON" in result.errors[0]
    (row,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert set(row) == {"id", "kind", "job", "onset", "detected_at", "nodes", "ranks", "gpus", "evidence"}
    assert (row["kind"], row["onset"], row["ranks"]) == ("nan", 5.0, [0])
    assert row["detected_at"] >= row["onset"]  # the NaN detector settles briefly to name the earliest rank


def test_simulate_then_backtest_commands_write_incidents_and_a_report(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text(SCENARIO)
    rec = tmp_path / "rec.jsonl"
    assert main(["simulate", "--scenario", str(scenario), "--out", str(rec)]) == 0
    labels = json.loads((tmp_path / "rec.jsonl.labels.json").read_text())
    assert [(lab["kind"], lab["ranks"]) for lab in labels] == [("nan", [6]), ("nan", [1])]
    report = tmp_path / "report"
    assert main(["backtest", str(rec), "--out", str(tmp_path / "inc.jsonl"), "--labels",
                 str(tmp_path / "rec.jsonl.labels.json"), "--report", str(report)]) == 0
    data = json.loads((report / "report.json").read_text())
    assert data["per_kind"]["nan"]["recall"] == 1.0 and data["bad_lines"] == 0
    assert "| nan |" in (report / "report.md").read_text()
    assert (report / "timeline.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "report written" in capsys.readouterr().out


def test_commands_refuse_bad_input_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nduration_s: 10\njob: {nodes: -2}\n")
    assert main(["simulate", "--scenario", str(bad), "--out", str(tmp_path / "r.jsonl")]) == 2
    assert "job.nodes" in capsys.readouterr().err
    rec = tmp_path / "r.jsonl"
    write_recording(rec, steps(2, 9))
    (tmp_path / "labels.json").write_text('[{"id": "x"}]')
    assert main(["backtest", str(rec), "--out", str(tmp_path / "i.jsonl"), "--labels",
                 str(tmp_path / "labels.json")]) == 2
    assert "expected a JSON list" in capsys.readouterr().err
    assert main(["backtest", str(tmp_path / "none.jsonl"), "--out", str(tmp_path / "i.jsonl")]) == 2


def test_backtest_eval_pools_figures_over_a_scenario_set(tmp_path: Path) -> None:
    sets = tmp_path / "set"
    sets.mkdir()
    (sets / "a.yaml").write_text(SCENARIO)
    (sets / "quiet.yaml").write_text("name: q\nseed: 4\nduration_s: 900\njob: {nodes: 1, tp: 8}\n")
    main(["backtest-eval", str(sets), "--report", str(tmp_path / "eval")])
    report = json.loads((tmp_path / "eval" / "report.json").read_text())
    assert [s["scenario"] for s in report["scenarios"]] == ["cli-small", "q"]
    assert report["per_kind"]["nan"]["labels"] == 2
    assert {k: v["faults"] for k, v in report["per_variant"].items()} == {"nan/grad": 1, "nan/loss": 1}
    assert (tmp_path / "eval" / "cli-small" / "timeline.png").is_file()
    assert "Incidents on fault-free scenarios" in (tmp_path / "eval" / "report.md").read_text()
    quality = report["quality"]["nan"]  # issue 22: what peers publish, per detector
    assert set(quality) >= {"precision", "recall", "f1", "latency_p50_s", "latency_p95_s", "false_per_day",
                            "false_per_day_per_1000_gpus", "over_evicted"}
    assert quality["false_per_day"] == 0.0 and quality["f1"] == 1.0
    assert "| kind | precision | recall | F1 |" in (tmp_path / "eval" / "report.md").read_text()


def test_progress_bar_reports_bytes_read(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    write_recording(path, steps(9000, 4500))
    seen: list[int] = []
    result = run_backtest(path, DetectionPipeline([NanDetector()]), progress=seen.append)
    assert result.events == 9000
    assert seen == sorted(seen) and len(seen) >= 3 and seen[-1] == path.stat().st_size
    assert main(["backtest", str(path), "--out", str(tmp_path / "i.jsonl"), "--progress", "on"]) == 0


def test_backtest_reports_its_speed_against_reading_the_same_file(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    rec = tmp_path / "r.jsonl"
    write_recording(rec, steps(3000, 1500))
    assert main(["backtest", str(rec), "--out", str(tmp_path / "i.jsonl")]) == 0
    out = capsys.readouterr().out
    speed = re.search(r"([\d,]+) events per CPU-second; reading and decoding the same file alone: ([\d,]+) "
                      r"\(the backtest runs at ([\d.]+)x its input's speed\)", out)
    assert speed, out
    backtest, floor, ratio = (float(g.replace(",", "")) for g in speed.groups())
    assert backtest > 0 and floor > 0 and ratio == pytest.approx(backtest / floor, abs=0.01)
    assert main(["backtest", str(rec), "--out", str(tmp_path / "i.jsonl"), "--no-floor"]) == 0
    assert "CPU-second" not in capsys.readouterr().out


def test_the_floor_reads_every_good_line_and_skips_bad_ones(tmp_path: Path) -> None:
    from trainguard.lab.backtest.runner import read_floor

    rec = tmp_path / "r.jsonl"
    write_recording(rec, steps(50, 99))
    with open(rec, "a") as f:
        f.write("{broken\n")
    assert read_floor(rec) > 0
    result = run_backtest(rec, DetectionPipeline([NanDetector()]))
    assert result.cpu_s > 0 and result.events_per_cpu_s > 0 and (result.events, result.bad_lines) == (50, 1)
    assert (result.first_ts, result.last_ts) == (1.0, 50.0)


HW_BURST = """
name: rollout-burst
seed: 4
duration_s: 3000
job: {name: wide, nodes: 8, gpus_per_node: 2, tp: 2, pp: 1, step_time_s: 5.0, checkpoint_every_s: 300}
faults:
  - {kind: hw_fault, at_s: 300, variant: xid, code: 79, node: 1}
  - {kind: hw_fault, at_s: 1000, variant: xid, code: 79, node: 2}
  - {kind: hw_fault, at_s: 1700, variant: xid, code: 79, node: 3}
  - {kind: nan, at_s: 2500, rank: 6, variant: loss}
"""


def test_backtest_report_decides_every_incident_in_auto_and_says_what_the_breaker_would_hold(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Three node faults of one 8-node job within the breaker's hour: 25% lets two through, the third is held."""
    monkeypatch.setenv("COLUMNS", "240")
    scenario = tmp_path / "s.yaml"
    scenario.write_text(HW_BURST)
    rec = tmp_path / "rec.jsonl"
    assert main(["simulate", "--scenario", str(scenario), "--out", str(rec)]) == 0
    report = tmp_path / "report"
    assert main(["backtest", str(rec), "--out", str(tmp_path / "inc.jsonl"), "--report", str(report)]) == 0
    incidents = [json.loads(line) for line in (tmp_path / "inc.jsonl").read_text().splitlines()]
    rows = {r["rule"]: r for r in json.loads((report / "rollout.json").read_text())["rules"]}
    assert sum(r["decisions"] for r in rows.values()) == len(incidents)  # every incident decided
    assert all(r["mode"] == "auto" and r["observed"] == r["decisions"] and r["acted"] == 0 for r in rows.values())
    hw = rows["hw_fault.evict_swap_restart"]
    assert hw["decisions"] == 3 and hw["evictions"] == 3 and hw["restarts"] == 3
    assert hw["would_block"] == 1 and len(hw["nodes"]) == 3
    assert any(rule.startswith("nan.") for rule in rows)
    out = capsys.readouterr().out
    assert "decided in auto, nothing executed" in out and "hw_fault.evict_swap_restart" in out


def test_the_printed_floor_straddles_the_run(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The floor is read before and after the run and judged over both passes, so a machine whose speed
    drifts during the run does not set the ratio by one pass alone."""
    from trainguard.lab.backtest import runner

    rec = tmp_path / "r.jsonl"
    write_recording(rec, steps(50, 99))
    passes = iter([100_000.0, 300_000.0])
    monkeypatch.setattr(runner, "read_floor", lambda _path: next(passes))
    assert main(["backtest", str(rec), "--out", str(tmp_path / "i.jsonl")]) == 0
    assert "reading and decoding the same file alone: 150,000 " in capsys.readouterr().out
    assert next(passes, None) is None  # both passes were read
