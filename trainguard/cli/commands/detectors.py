"""`trainguard detectors list|train`: what detectors exist, and the node-health model.

`list` shows every detector type registered under the `trainguard.detectors`
entry-point group (built-ins and installed plug-ins alike), the record types
it consumes, its parameters with their defaults, and which configured
instances run it.

`train RECORDING --out MODEL` fits the node-health model
(`detectors.health_model`) on the GPU samples of a recording (JSON Lines)
and writes it with its feature list and format version. Use it in config as
`{type: node_health, params: {model_path: MODEL}}`.
"""

from __future__ import annotations

import argparse
import inspect
import sys
from pathlib import Path
from typing import Any

from trainguard.settings import Settings


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("detectors", help="list detector types; train the node-health model",
                       description="List the registered detector types (built-ins and plug-ins), or train the "
                       "node-health model from a recording.")
    actions = p.add_subparsers(dest="detectors_action", metavar="ACTION", required=True)
    actions.add_parser("list", help="show registered detector types, their parameters and configured instances")
    train = actions.add_parser("train", help="train the node-health model (IsolationForest) from a recording",
                               description="Fit the node-health IsolationForest on the GPU samples of a "
                               "recording (JSON Lines) and save it with its feature list and version.")
    train.add_argument("recording", type=Path, metavar="RECORDING", help="recording (.jsonl) with gpu_sample events")
    train.add_argument("--out", type=Path, required=True, metavar="MODEL", help="model file to write")
    train.add_argument("--quantile", type=float, default=0.002,
                       help="share of training samples scored abnormal; sets the threshold (default 0.002)")
    train.add_argument("--trees", type=int, default=100, help="trees in the forest (default 100)")
    train.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace, settings: Settings) -> int:
    if args.detectors_action == "list":
        return list_detectors(settings)
    return train_model(args)


def describe(type_name: str) -> dict[str, Any]:
    """One registered type: where it lives, what it consumes, its parameters."""
    from trainguard.detectors.dispatch import consumes
    from trainguard.detectors.registry import available, load

    cls = load(type_name)
    params = {
        name: (None if p.default is inspect.Parameter.empty else p.default)
        for name, p in inspect.signature(cls.__init__).parameters.items()
        if p.kind is inspect.Parameter.KEYWORD_ONLY and name != "instance"
    }
    doc = (cls.__doc__ or "").strip().splitlines()
    return {"type": type_name, "target": available()[type_name], "consumes": sorted(consumes(cls)),
            "params": params, "summary": doc[0] if doc else ""}


def list_detectors(settings: Settings) -> int:
    from rich.console import Console
    from rich.table import Table

    from trainguard.detectors.registry import available

    configured: dict[str, list[str]] = {}
    for spec in settings.detectors.instances:
        label = spec.instance + ("" if spec.enabled else " (disabled)")
        configured.setdefault(spec.type, []).append(label)
    table = Table(title="Registered detector types (entry-point group trainguard.detectors)")
    for column in ("type", "consumes", "parameters (defaults)", "configured instances", "implementation"):
        table.add_column(column, overflow="fold")
    for name in sorted(available()):
        try:
            info = describe(name)
        except Exception as exc:  # a broken plug-in must not hide the others
            table.add_row(name, "", f"cannot load: {exc}", "", available()[name])
            continue
        params = ", ".join(f"{k}={v!r}" for k, v in info["params"].items())
        table.add_row(name, ", ".join(info["consumes"]), params, ", ".join(configured.get(name, [])) or "-",
                      info["target"])
    Console(width=160).print(table)
    unknown = sorted(set(configured) - set(available()))
    if unknown:
        print(f"configured but not registered: {', '.join(unknown)}", file=sys.stderr)
        return 1
    return 0


def train_model(args: argparse.Namespace) -> int:
    from trainguard.detectors.health_model import NodeFeatures, train
    from trainguard.schemas.records import NodeGpuSample
    from trainguard.streams.recording import RecordingError, read_recording

    if not args.recording.is_file():
        print(f"trainguard detectors train: {args.recording}: not found", file=sys.stderr)
        return 2
    bad: list[str] = []

    def on_error(err: RecordingError) -> None:
        bad.append(str(err))

    features = NodeFeatures()
    rows: list[list[float]] = []
    for event in read_recording(args.recording, on_error=on_error):
        if isinstance(event.value, NodeGpuSample):
            row = features(event.value)
            if row is not None:
                rows.append(row)
    try:
        model = train(rows, quantile=args.quantile, trees=args.trees, seed=args.seed)
    except ValueError as exc:
        print(f"trainguard detectors train: {args.recording}: {exc}", file=sys.stderr)
        return 2
    model.trained_on["recording"] = str(args.recording)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(model.to_bytes())
    print(f"trained node-health model on {len(rows)} node samples ({len(bad)} bad lines skipped); "
          f"threshold {model.threshold:.4f}; wrote {args.out}")
    return 0
