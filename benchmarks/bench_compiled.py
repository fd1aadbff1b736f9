"""The detectors compiled with mypyc against the same detectors interpreted (a benchmark, not a test).

Run: `python -m benchmarks compiled [--nodes N] [--minutes M | --recording FILE] [--rounds R]`.

Why: issue 23's backtest and worker targets need the detectors' own work
about 1.6x cheaper, and no change to their Python has come near that
(docs/sizing.md). This measures what compiling them gives before the
project commits to a compiled build ("A compiled detector core" there).

What it does:

* copies the package (symlinked rooms resolved) into a temporary directory
  and compiles the modules in `COMPILED` there with mypyc, which ships with
  mypy (the `test` extra), under the project's mypy settings. That takes
  about 15 minutes of one core on a 2-core machine; the installed tree is
  not touched;
* simulates the fleet `bench_detectors` uses (`--nodes`, `--minutes`), or
  reads a recording (`--recording`, as `trainguard backtest` reads one), and
  pickles its records to a file;
* in fresh processes, alternating which goes first each round, feeds the
  records through `DetectionPipeline.from_settings(DetectorSettings())` in
  chunks of 128 (as the backtest does), once interpreted (the installed
  tree) and once compiled (the copy first on `sys.path`), best of three
  passes each, CPU time of the process;
* prints µs per event, the ratio per round and its median, and a digest of
  the anomalies and incidents each found: they must be the same.

A compiled process that did not load the compiled detectors says so and
stops the run (exit code 2): its figure would be the interpreter's.
It asserts nothing else.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import pickle
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

# The detectors' hot modules. Left out: dispatch (its HandlerError subclasses TypeError, which mypyc cannot
# compile as a native class), registry and settings (start-up only; settings is pydantic), health_model
# (scikit-learn), and the test helpers (checks, state_tree, synthetic).
COMPILED = ("app_xid", "base", "common", "correlate", "hang", "hardware", "logs", "loss_spike", "metric_anomaly",
            "metric_models", "nan", "network", "node_health", "peers", "persistence", "pipeline", "sdc",
            "slowdown", "stacks", "trend", "xid")
CHUNK = 128  # records per `process_all` call, as `trainguard backtest` reads them
MYPY_INI = "[mypy]\npython_version = 3.11\nignore_missing_imports = True\nplugins = pydantic.mypy\n"


def compile_copy(into: Path) -> Path:
    """A copy of the package with `COMPILED` built in place by mypyc; the directory to put first on sys.path."""
    shutil.copytree(ROOT / "trainguard", into / "trainguard", symlinks=False,
                    ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    (into / "mypy.ini").write_text(MYPY_INI)
    modules = [f"trainguard/detectors/{name}.py" for name in COMPILED]
    mypyc = Path(sys.executable).with_name("mypyc")
    done = subprocess.run([str(mypyc), *modules], cwd=into, capture_output=True, text=True)
    if done.returncode != 0:
        tail = (done.stdout + done.stderr).strip().splitlines()[-5:]
        raise SystemExit("mypyc failed:\n" + "\n".join(tail))
    return into


def measure(records_file: Path, tree: str, passes: int = 3) -> dict[str, Any]:
    """µs per event of the default pipeline over the pickled records, and a digest of what it found."""
    if tree:
        sys.path.insert(0, tree)  # before any import of trainguard
    from trainguard.detectors import common
    from trainguard.detectors.pipeline import DetectionPipeline
    from trainguard.detectors.settings import DetectorSettings

    records = pickle.loads(records_file.read_bytes())
    gc.freeze()  # the records live through every pass, as a recording's do through a backtest
    best, digest = float("inf"), ""
    try:
        for _ in range(passes):
            pipeline = DetectionPipeline.from_settings(DetectorSettings())
            found = []
            start = time.process_time()
            for i in range(0, len(records), CHUNK):
                found += pipeline.process_all(records[i:i + CHUNK])
            best = min(best, time.process_time() - start)
            digest = _digest(found)
    finally:
        gc.unfreeze()
    return {"us": best / len(records) * 1e6, "digest": digest, "compiled": common.__file__.endswith(".so"),
            "events": len(records)}


def load(recording: Path) -> list[Any]:
    """A recording's records, in file order; a line that does not decode is left out."""
    from trainguard.streams.recording import read_recording

    return [event.value for event in read_recording(recording, on_error=lambda _error: None)]


def _digest(found: Sequence[tuple[Sequence[Any], Sequence[Any]]]) -> str:
    """What a pass found, as a short digest: anomalies and incidents, in order."""
    h = hashlib.sha256()
    for anomalies, incidents in found:
        for item in (*anomalies, *incidents):
            h.update(repr(item).encode())
    return h.hexdigest()[:16]


def _run(records_file: Path, tree: str) -> dict[str, Any]:
    """One fresh process's measurement (its own interpreter state, nothing shared with the other build)."""
    argv = [sys.executable, "-m", "benchmarks.bench_compiled", "--measure", str(records_file), "--tree", tree]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=True)
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def ratio_rounds(rounds: Sequence[tuple[dict[str, Any], dict[str, Any]]]) -> list[float]:
    """Interpreted over compiled µs per event, within each round (the speed-up of compiling).

    >>> ratio_rounds([({"us": 6.0}, {"us": 3.0}), ({"us": 5.0}, {"us": 4.0})])
    [2.0, 1.25]
    """
    return [interp["us"] / compiled["us"] for interp, compiled in rounds]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_compiled", description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=128,
                        help="simulated nodes of 8 GPUs, a multiple of 4 (tp=8, pp=4; default 128)")
    parser.add_argument("--minutes", type=float, default=10.0, help="simulated minutes of the fleet (default 10)")
    parser.add_argument("--recording", type=Path, help="a recording (JSON Lines) to feed, not the simulated fleet")
    parser.add_argument("--rounds", type=int, default=3, help="alternating pairs of runs (default 3)")
    parser.add_argument("--measure", type=Path, help=argparse.SUPPRESS)  # a child process: measure and print JSON
    parser.add_argument("--tree", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.measure:
        print(json.dumps(measure(args.measure, args.tree)))
        return 0
    if args.recording and not args.recording.is_file():
        print(f"--recording {args.recording}: no such file", file=sys.stderr)
        return 2
    from benchmarks.bench_detectors import simulate
    from benchmarks.interpreter import describe

    with tempfile.TemporaryDirectory(prefix="tg-compiled-") as tmp:
        work = Path(tmp)
        print(f"interpreter: {describe()}")
        print(f"compiling {len(COMPILED)} detector modules with mypyc (minutes)...", flush=True)
        started = time.monotonic()
        tree = str(compile_copy(work / "build"))
        print(f"compiled in {time.monotonic() - started:.0f} s", flush=True)
        records_file = work / "records.pickle"
        records_file.write_bytes(pickle.dumps(load(args.recording) if args.recording else
                                              simulate(args.nodes, args.minutes)))
        rounds = []
        for i in range(args.rounds):
            order = ("", tree) if i % 2 == 0 else (tree, "")
            runs = {t: _run(records_file, t) for t in order}
            interp, compiled = runs[""], runs[tree]
            if not compiled["compiled"] or interp["compiled"]:
                print("the compiled build did not load (or the interpreted one did not run interpreted)",
                      file=sys.stderr)
                return 2
            rounds.append((interp, compiled))
            same = "same findings" if interp["digest"] == compiled["digest"] else "DIFFERENT findings"
            print(f"round {i + 1}: {interp['events']:,} events; interpreted {interp['us']:.2f} µs/event, "
                  f"compiled {compiled['us']:.2f}: {ratio_rounds(rounds)[-1]:.2f}x, {same} "
                  f"({interp['digest']} / {compiled['digest']})", flush=True)
        ratios = ratio_rounds(rounds)
        print(f"compiled / interpreted speed-up: median {statistics.median(ratios):.2f}x "
              f"(range {min(ratios):.2f}-{max(ratios):.2f}), load {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
