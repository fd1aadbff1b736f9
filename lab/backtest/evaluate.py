"""Quality evaluation: simulate every scenario of a set, backtest each, pool the figures.

This is what `trainguard backtest-eval scenarios/evaluation` (and
`make eval`) runs. Per-kind counts are summed across scenarios before the
ratios are taken, so a kind that appears in several scenarios is judged on
all its faults together. Fault-free scenarios contribute their incidents
as false positives, which is how "zero incidents in a quiet day" shows up.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trainguard.detectors.pipeline import DetectionPipeline
from trainguard.detectors.settings import DetectorSettings
from trainguard.lab.backtest.report import build_report, cell, markdown, write_report
from trainguard.lab.backtest.runner import run_backtest
from trainguard.lab.backtest.scoring import DEFAULT_GRACE_S, KindTally, Score, score
from trainguard.lab.telemetry_sim import load_scenario, run_scenario
from trainguard.schemas.kinds import ANOMALY_KINDS
from trainguard.streams.recording import write_recording

# The targets, for the pass/fail column of the summary.
TARGETS = {"precision": 0.95, "recall": 0.95, "within_latency_target": 1.0}


def evaluate(scenario_dir: Path, out_dir: Path, detectors: DetectorSettings, *, grace_s: float = DEFAULT_GRACE_S,
             say: Callable[[str], None] = print) -> dict[str, Any]:
    """Run the whole evaluation; write out_dir/report.{json,md}; return the report."""
    files = sorted(scenario_dir.glob("*.yaml"))
    if not files:
        raise FileNotFoundError(f"no scenario files (*.yaml) in {scenario_dir}")
    pooled = {k: KindTally() for k in ANOMALY_KINDS}
    variants: dict[str, dict[str, int]] = {}
    shapes: dict[str, KindTally] = {}
    scenarios: list[dict[str, Any]] = []
    for file in files:
        row, scored = _one(file, out_dir, detectors, grace_s)
        for kind, tally in scored.tallies.items():
            pooled.setdefault(kind, KindTally()).add(tally)
        for key, tally in scored.shapes.items():
            shapes.setdefault(key, KindTally()).add(tally)
        for key, (faults, detected) in scored.variants.items():
            counts = variants.setdefault(key, {"faults": 0, "detected": 0})
            counts["faults"] += faults
            counts["detected"] += detected
        scenarios.append(row)
        say(f"{row['scenario']}: {row['events']} events, {row['faults']} faults, {row['incidents']} incidents "
            f"({row['false_positives']} unmatched), simulate {row['simulate_s']:.1f} s, "
            f"backtest {row['backtest_s']:.1f} s")
    report = {"scenario_dir": str(scenario_dir), "grace_s": grace_s, "scenarios": scenarios,
              "per_kind": {k: t.summary() for k, t in pooled.items()},
              "per_variant": dict(sorted(variants.items())),
              "per_shape": {k: t.summary() for k, t in sorted(shapes.items())},
              "quiet_incidents": sum(s["incidents"] for s in scenarios if s["faults"] == 0)}
    report["meets_targets"] = _targets(report["per_kind"])
    report["quality"] = quality(report["per_kind"], scenarios)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "report.json").write_text(json.dumps(report, indent=1) + "\n")
    (out_dir / "report.md").write_text(_markdown(report))
    return report


def _one(file: Path, out_dir: Path, detectors: DetectorSettings, grace_s: float) -> tuple[dict[str, Any], Score]:
    scenario = load_scenario(file)
    work = out_dir / scenario.name
    work.mkdir(parents=True, exist_ok=True)
    recording = work / "recording.jsonl"
    started = time.perf_counter()
    events, labels = run_scenario(scenario)
    write_recording(recording, events)
    (work / "labels.json").write_text(json.dumps(labels, indent=1) + "\n")
    simulate_s = time.perf_counter() - started
    with open(work / "incidents.jsonl", "wb") as out:
        result = run_backtest(recording, DetectionPipeline.from_settings(detectors), out=out)
    scored = score(labels, result.incidents, grace_s=grace_s)
    write_report(work, build_report(result, scored, recording=str(recording), grace_s=grace_s), labels,
                 result.incidents, scored)
    row = {"scenario": scenario.name, "file": str(file), "events": result.events, "faults": len(labels),
           "incidents": len(result.incidents), "missed": len(scored.missed),
           "false_positives": sum(1 for v in scored.matches.values() if v is None),
           "simulate_s": round(simulate_s, 2), "backtest_s": round(result.elapsed_s, 2),
           "events_per_s": round(result.events_per_s),
           "days": scenario.duration_s / 86_400.0, "gpus": scenario.fleet_nodes * max(
               j.gpus_per_node for j in scenario.all_jobs)}
    return row, scored


def quality(per_kind: dict[str, dict[str, Any]], scenarios: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per detector kind, the figures peers publish (Minder; the 504-GPU B200 study): precision, recall, F1,
    latency p50/p95, false incidents per day of fleet time and per day per 1,000 GPUs, over-evicted nodes.

    >>> q = quality({"nan": {"precision": 0.5, "recall": 1.0, "f1": 0.6667, "latency_median_s": 2.0,
    ...     "latency_p95_s": 3.0, "false_incidents": 1, "over_evicted": 0, "false_evictions": 0}},
    ...     [{"days": 2.0, "gpus": 500}])
    >>> q["nan"]["false_per_day"], q["nan"]["false_per_day_per_1000_gpus"]
    (0.5, 1.0)
    """
    days = sum(s.get("days", 0.0) for s in scenarios)
    gpu_days = sum(s.get("days", 0.0) * s.get("gpus", 0) for s in scenarios)
    out = {}
    for kind, row in per_kind.items():
        false = row.get("false_incidents", 0)
        out[kind] = {"precision": row["precision"], "recall": row["recall"], "f1": row.get("f1"),
                     "latency_p50_s": row["latency_median_s"], "latency_p95_s": row["latency_p95_s"],
                     "false_incidents": false,
                     "false_per_day": round(false / days, 3) if days else None,
                     "false_per_day_per_1000_gpus": round(1000 * false / gpu_days, 3) if gpu_days else None,
                     "over_evicted": row.get("false_evictions", 0), "on_transients": row.get("over_evicted", 0)}
    return out


def _targets(per_kind: dict[str, dict[str, Any]]) -> dict[str, bool | None]:
    """Per kind: whether every measured figure meets its target (None: no faults of that kind)."""
    out: dict[str, bool | None] = {}
    for kind, row in per_kind.items():
        if not row["labels"]:
            out[kind] = None if not row["incidents"] else False
            continue
        ok = all(row[k] is not None and row[k] >= TARGETS[k] for k in ("precision", "recall"))
        within = row["within_latency_target"]
        out[kind] = ok and (within is None or within >= TARGETS["within_latency_target"])
    return out


def _markdown(report: dict[str, Any]) -> str:
    text = markdown({**report, "missed_labels": [], "false_positives": []},
                    title=f"Quality evaluation: {report['scenario_dir']}")
    lines = ["", f"Incidents on fault-free scenarios: {report['quiet_incidents']} (target 0).", "",
             "Meets targets (precision >= 0.95, recall >= 0.95, every detection within its latency target):", ""]
    lines += [f"- {kind}: {'yes' if ok else ('n/a' if ok is None else 'NO')}"
              for kind, ok in report["meets_targets"].items()]
    days = sum(s.get("days", 0.0) for s in report["scenarios"])
    gpu_days = sum(s.get("days", 0.0) * s.get("gpus", 0) for s in report["scenarios"])
    lines += ["", f"Quality per detector ({days:.2f} days of fleet time, {gpu_days:,.0f} GPU-days; over-evicted: "
              "incidents of an evicting kind naming a node that had no fault; on transients: of those, the ones on "
              "a fail-slow that recovered within two minutes):", "",
              "| kind | precision | recall | F1 | latency p50 s | latency p95 s | false incidents | per day | "
              "per day per 1,000 GPUs | over-evicted | on transients |", "|---" * 11 + "|"]
    lines += [f"| {kind} | {cell(q['precision'])} | {cell(q['recall'])} | {cell(q['f1'])} | "
              f"{cell(q['latency_p50_s'])} | {cell(q['latency_p95_s'])} | {q['false_incidents']} | "
              f"{cell(q['false_per_day'])} | {cell(q['false_per_day_per_1000_gpus'])} | {q['over_evicted']} | "
              f"{q['on_transients']} |"
              for kind, q in report.get("quality", {}).items()]
    lines += ["", "Per fault shape (precision is per kind above: a false alarm has no shape):", "",
              "| shape | faults | detected | recall | latency p50 s | latency p95 s | within target | right node | "
              "localised |", "|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {shape} | {row['labels']} | {row['detected']} | {cell(row['recall'])} | "
              f"{cell(row['latency_median_s'])} | {cell(row['latency_p95_s'])} | "
              f"{cell(row['within_latency_target'])} | {cell(row['node_accuracy'])} | "
              f"{cell(row['localisation_accuracy'])} |" for shape, row in report.get("per_shape", {}).items()]
    lines += ["", "| scenario | events | faults | incidents | missed | unmatched | backtest s | events/s |",
              "|---|---|---|---|---|---|---|---|"]
    lines += [f"| {s['scenario']} | {s['events']} | {s['faults']} | {s['incidents']} | {s['missed']} | "
              f"{s['false_positives']} | {s['backtest_s']} | {s['events_per_s']} |" for s in report["scenarios"]]
    lines += ["", "Each scenario's own report (report.md, timeline.png) is in its subdirectory."]
    return text + "\n".join(lines) + "\n"
