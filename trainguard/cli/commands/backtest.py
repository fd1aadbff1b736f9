"""`trainguard backtest` and `trainguard backtest-eval`: offline detector runs and quality figures."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from trainguard.cli.commands.needs_lab import needs_lab
from trainguard.settings import Settings

if TYPE_CHECKING:
    from trainguard.schemas.records import Incident

PROGRESS_MIN_BYTES = 20 << 20  # show a progress bar for recordings above 20 MiB


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("backtest", help="run the configured detectors over a recording, offline",
                       description="Run the configured detectors over a recording at full speed, with no Kafka, "
                       "and write the incidents as JSON Lines. With --labels, score them per kind and write a "
                       "report (report.json, report.md, timeline.png) into --report DIR. With --report, also "
                       "decide every incident with the decision engine, every kind in auto and nothing executed, "
                       "and print the shadow report's per-rule table (`trainguard actions report`), also written "
                       "to DIR/rollout.json: what auto would have done before a kind is promoted.")
    p.add_argument("recording", type=Path, metavar="RECORDING")
    p.add_argument("--out", type=Path, required=True, metavar="INCIDENTS", help="incidents file to write (.jsonl)")
    p.add_argument("--labels", type=Path, metavar="LABELS", help="ground-truth labels (JSON list) to score against")
    p.add_argument("--report", type=Path, metavar="DIR",
                   help="report directory: the rollout table (rollout.json), and with --labels the scores "
                   "(default with --labels: beside --out)")
    p.add_argument("--grace", type=float, default=120.0, metavar="S",
                   help="an incident matches a fault detected up to S seconds after its end (default: %(default)s)")
    p.add_argument("--drain", type=float, default=0.0, metavar="S",
                   help="advance event time S seconds past the last event at the end (default: %(default)s)")
    p.add_argument("--progress", choices=["auto", "on", "off"], default="auto",
                   help="progress bar (auto: for recordings over 20 MiB on a terminal)")
    p.add_argument("--no-floor", dest="floor", action="store_false",
                   help="skip the speed floor: by default the recording is also read and decoded alone, once "
                   "before and once after the run, and the backtest's events per CPU-second are printed against "
                   "both passes' rate (a shared machine's speed drifts)")
    p.set_defaults(handler=run)
    e = sub.add_parser("backtest-eval", help="simulate and backtest a scenario set; pool quality figures per kind",
                       description="For every *.yaml scenario in DIR: simulate it, backtest the configured "
                       "detectors on it and score them; then pool the figures per kind into REPORT/report.md "
                       "and report.json (per-scenario reports and timelines in subdirectories).")
    e.add_argument("scenarios", type=Path, metavar="DIR", help="e.g. scenarios/evaluation")
    e.add_argument("--report", type=Path, default=Path("out/eval"), metavar="REPORT",
                   help="output directory (default: %(default)s)")
    e.add_argument("--grace", type=float, default=120.0, metavar="S", help="matching grace (default: %(default)s)")
    e.set_defaults(handler=run_eval)


@needs_lab("backtest")
def run(args: argparse.Namespace, settings: Settings) -> int:
    from trainguard.detectors.pipeline import DetectionPipeline
    from trainguard.lab.backtest.report import build_report, markdown, write_report
    from trainguard.lab.backtest.runner import read_floor, run_backtest, straddled_floor
    from trainguard.lab.backtest.scoring import score

    if not args.recording.is_file():
        print(f"trainguard backtest: recording {args.recording}: not found", file=sys.stderr)
        return 2
    labels = _load_labels(args.labels) if args.labels else None
    if args.labels and labels is None:
        return 2
    pipeline = DetectionPipeline.from_settings(settings.detectors)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    floor_before = read_floor(args.recording) if args.floor else 0.0
    with open(args.out, "wb") as out, _progress(args.recording, args.progress) as progress:
        result = run_backtest(args.recording, pipeline, out=out, progress=progress, drain_s=args.drain)
    print(f"{result.events} events, {result.anomalies} anomalies, {len(result.incidents)} incidents -> {args.out} "
          f"({result.events_per_s:,.0f} events/s)")
    if args.floor and result.events:
        floor, rate = straddled_floor(floor_before, read_floor(args.recording)), result.events_per_cpu_s
        print(f"{rate:,.0f} events per CPU-second; reading and decoding the same file alone: "
              f"{floor:,.0f} (the backtest runs at {rate / max(floor, 1e-9):.2f}x its input's speed)")
    if result.bad_lines:
        print(f"skipped {result.bad_lines} bad lines; first: {result.errors[0]}", file=sys.stderr)
    if labels is not None:
        scored = score(labels, result.incidents, grace_s=args.grace)
        report = build_report(result, scored, recording=str(args.recording), grace_s=args.grace)
        directory = args.report or args.out.parent / (args.out.stem + "-report")
        write_report(directory, report, labels, result.incidents, scored)
        print(markdown(report).split("\n## ")[0])
        print(f"report written to {directory}/report.md, report.json, timeline.png")
    if args.report is not None:
        _rollout(args, settings, result.opened)
    return 1 if result.bad_lines else 0


def _rollout(args: argparse.Namespace, settings: Settings, incidents: list[Incident]) -> None:
    """The per-rule table of what `auto` would have done with these incidents (lab/backtest/rollout.py)."""
    from trainguard.cli.commands.actions_log import print_report
    from trainguard.lab.backtest.rollout import rollout_rows

    rows = rollout_rows(args.recording, incidents, settings.actions)
    print_report(rows, title=f"rollout: the backtest's {len(incidents)} incidents decided in auto, nothing executed")
    args.report.mkdir(parents=True, exist_ok=True)
    (args.report / "rollout.json").write_text(json.dumps({"recording": str(args.recording),
                                                          "rules": [r.as_dict() for r in rows]}, indent=1))
    print(f"rollout table written to {args.report}/rollout.json")


@needs_lab("backtest-eval")
def run_eval(args: argparse.Namespace, settings: Settings) -> int:
    from trainguard.lab.backtest.evaluate import evaluate
    from trainguard.lab.telemetry_sim import ScenarioError, TraceError

    try:
        report = evaluate(args.scenarios, args.report, settings.detectors, grace_s=args.grace)
    except (ScenarioError, TraceError, FileNotFoundError) as exc:
        print(f"trainguard backtest-eval: {exc}", file=sys.stderr)
        return 2
    print((args.report / "report.md").read_text())
    return 0 if all(ok is not False for ok in report["meets_targets"].values()) else 1


def _load_labels(path: Path) -> list[dict[str, object]] | None:
    try:
        labels = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        print(f"trainguard backtest: labels {path}: {exc}", file=sys.stderr)
        return None
    required = {"id", "kind", "start", "end", "job", "nodes", "ranks"}
    if not isinstance(labels, list) or any(not isinstance(x, dict) or required - x.keys() for x in labels):
        print(f"trainguard backtest: labels {path}: expected a JSON list of objects with "
              f"{', '.join(sorted(required))}", file=sys.stderr)
        return None
    return labels


@contextmanager
def _progress(recording: Path, mode: str) -> Iterator[Callable[[int], None] | None]:
    size = recording.stat().st_size
    show = mode == "on" or (mode == "auto" and size >= PROGRESS_MIN_BYTES and sys.stderr.isatty())
    if not show:
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

    with Progress(TextColumn("backtest"), BarColumn(), DownloadColumn(), TimeRemainingColumn(),
                  console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task("backtest", total=size)
        yield lambda done: bar.update(task, completed=done)
