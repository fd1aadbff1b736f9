"""Backtest reports: report.json for machines, report.md for people, timeline.png for eyes.

The JSON carries every figure the markdown shows, plus the missed labels
and the false-positive incidents, so a regression can be diffed and a
surprising figure traced back to the events behind it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from trainguard.lab.backtest.runner import BacktestResult
from trainguard.lab.backtest.scoring import Score
from trainguard.lab.backtest.timeline import plot_timeline

COLUMNS = (("labels", "faults"), ("detected", "detected"), ("incidents", "incidents"), ("precision", "precision"),
           ("recall", "recall"), ("latency_median_s", "latency p50 s"), ("latency_p95_s", "latency p95 s"),
           ("within_latency_target", "within target"), ("node_accuracy", "right node"),
           ("rank_accuracy", "right rank"), ("localisation_accuracy", "localised"),
           ("false_evictions", "false evictions"))


def build_report(result: BacktestResult, score: Score, *, recording: str, grace_s: float) -> dict[str, Any]:
    """Everything a report shows, as plain JSON-ready data."""
    false_positives = [i for i in result.incidents if score.matches.get(i["id"]) is None]
    return {
        "recording": recording,
        "events": result.events,
        "bad_lines": result.bad_lines,
        "errors": result.errors,
        "anomalies": result.anomalies,
        "incidents": len(result.incidents),
        "elapsed_s": round(result.elapsed_s, 3),
        "events_per_s": round(result.events_per_s, 1),
        "event_time": {"first": result.first_ts, "last": result.last_ts},
        "grace_s": grace_s,
        "per_kind": score.per_kind(),
        "per_variant": {k: {"faults": v[0], "detected": v[1]} for k, v in sorted(score.variants.items())},
        "per_shape": score.per_shape(),
        "missed_labels": score.missed,
        "false_positives": [{k: i[k] for k in ("id", "kind", "detected_at", "nodes", "ranks")}
                            for i in false_positives],
    }


def markdown(report: dict[str, Any], title: str = "Backtest report") -> str:
    """The per-kind table and the lists of misses and false positives."""
    lines = [f"# {title}", ""]
    if "recording" in report:
        lines += [f"Recording `{report['recording']}`: {report['events']} events ({report['bad_lines']} bad lines "
                  f"skipped), {report['incidents']} incidents, {report['events_per_s']:.0f} events/s.", ""]
    lines += [f"Matching: an incident matches a fault of the same kind and job when its detected_at lies in "
              f"[start, end + {report['grace_s']:g} s].", ""]
    lines.append("| kind | " + " | ".join(h for _, h in COLUMNS) + " |")
    lines.append("|---" * (len(COLUMNS) + 1) + "|")
    for kind, row in report["per_kind"].items():
        if row["labels"] or row["incidents"]:
            lines.append(f"| {kind} | " + " | ".join(cell(row[k]) for k, _ in COLUMNS) + " |")
    variants = report.get("per_variant") or {}
    if variants:
        lines += ["", "Detected per fault variant: " + ", ".join(
            f"{k} {v['detected']}/{v['faults']}" for k, v in variants.items()) + "."]
    for key, heading in (("missed_labels", "Missed faults"), ("false_positives", "Incidents matching no fault")):
        items = report.get(key) or []
        if items:
            lines += ["", f"## {heading} ({len(items)})", ""]
            lines += [f"- {json.dumps(item)}" for item in items[:100]]
    if report.get("errors"):
        lines += ["", f"## Bad lines ({report['bad_lines']})", ""] + [f"- {e}" for e in report["errors"]]
    return "\n".join(lines) + "\n"


def cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1000 else f"{value:.0f}"
    return str(value)


def write_report(directory: Path, report: dict[str, Any], labels: list[dict[str, Any]],
                 incidents: list[dict[str, Any]], score: Score) -> None:
    """Write report.json, report.md and timeline.png into `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "report.json").write_text(json.dumps(report, indent=1) + "\n")
    (directory / "report.md").write_text(markdown(report))
    first, last = report["event_time"]["first"], report["event_time"]["last"]
    if first is not None and last is not None:
        plot_timeline(directory / "timeline.png", labels, incidents, score.matches, t0=first, t1=last,
                      title=Path(report["recording"]).name)
