"""`trainguard simulate`: write a simulated fleet's recording and its labels."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from trainguard.cli.commands.needs_lab import needs_lab
from trainguard.settings import Settings


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("simulate", help="simulate a training fleet with injected faults",
                       description="Generate a recording (JSON Lines) of a simulated training fleet described by "
                       "a scenario YAML file, and a labels file listing every injected fault. "
                       "See docs/simulate-backtest.md.")
    p.add_argument("--scenario", type=Path, required=True, metavar="FILE", help="scenario YAML file")
    p.add_argument("--out", type=Path, required=True, metavar="RECORDING", help="recording to write (.jsonl)")
    p.add_argument("--labels", type=Path, metavar="PATH", help="labels file (default: RECORDING.labels.json)")
    p.set_defaults(handler=run)


def labels_path(recording: Path) -> Path:
    """Where the labels of a recording go by default."""
    return recording.with_name(recording.name + ".labels.json")


def simulate_to(scenario_path: Path, out: Path, labels: Path | None = None) -> tuple[int, int]:
    """Simulate one scenario file into `out`; return (events, faults)."""
    from trainguard.lab.telemetry_sim import load_scenario, run_scenario
    from trainguard.streams.recording import write_recording

    scenario = load_scenario(scenario_path)
    events, truth = run_scenario(scenario)
    out.parent.mkdir(parents=True, exist_ok=True)
    count = write_recording(out, events)
    labels_file = labels or labels_path(out)
    labels_file.write_text(json.dumps(truth, indent=1) + "\n")
    return count, len(truth)


@needs_lab("simulate")
def run(args: argparse.Namespace, settings: Settings) -> int:
    from trainguard.lab.telemetry_sim import ScenarioError, TraceError

    try:
        count, faults = simulate_to(args.scenario, args.out, args.labels)
    except (ScenarioError, TraceError) as exc:
        print(f"trainguard simulate: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {count} events to {args.out} and {faults} labels to {args.labels or labels_path(args.out)}")
    return 0
