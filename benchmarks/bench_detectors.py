"""Detector throughput and state memory on a 1,024-GPU fleet (a benchmark, not a test).

Run: `python -m benchmarks.bench_detectors [--minutes M] [--nodes N]`.

It simulates a fleet with the project's simulator (128 nodes x 8 GPUs,
tp=8, pp=4, dp=32 by default; a few faults so detectors do real work),
then measures, on one core (the process pins itself to one CPU when the
OS allows it):

* detector throughput: records already decoded, fed one by one through
  `DetectionPipeline.from_settings(DetectorSettings())` (the default
  detectors plus the correlator) — the detectors' own cost;
* backtest throughput: the same recording read from JSON Lines, decoded
  and detected by `trainguard.backtest.runner.run_backtest` — what
  `trainguard backtest` achieves end to end;
* decode-only baseline: the same file read and decoded, nothing detected
  (`streams.recording.read_recording`), the natural baseline both rates
  above are quoted against;
* detector state memory per 1,000 GPUs: the pickled size of the pipeline
  (what the worker checkpoints) and the traced Python heap it holds.

Rates are events per second of *CPU time* of this single-threaded process
(`time.process_time`), i.e. per core, so they hold better on a shared machine
where wall-clock rates would mostly measure the neighbours; the detector
figure is the best of three fresh runs.

It prints the figures and asserts nothing.
"""

from __future__ import annotations

import argparse
import gc
import os
import pickle
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

from detectors.pipeline import DetectionPipeline
from detectors.settings import DetectorSettings
from schemas.records import Record


def scenario(nodes: int, minutes: float) -> dict[str, Any]:
    """A fleet scenario with one straggler: detectors stay busy, mostly quiet."""
    duration = minutes * 60.0
    return {
        "name": "bench-1024",
        "seed": 7,
        "duration_s": duration,
        "job": {"name": "bench", "nodes": nodes, "gpus_per_node": 8, "tp": 8, "pp": 4, "step_time_s": 2.0,
                "checkpoint_every_s": 600, "checkpoint_pause_s": 30},
        "faults": [
            {"kind": "slowdown", "at_s": duration * 0.3, "magnitude": 0.2, "duration_s": duration * 0.3},
        ],
    }


def simulate(nodes: int, minutes: float) -> list[Record]:
    """The fleet's records, in event-time order."""
    from trainguard.simulate import run_scenario
    from trainguard.simulate.scenario import parse_scenario

    events, _ = run_scenario(parse_scenario(scenario(nodes, minutes), "bench"))
    return list(events)


def detector_throughput(records: list[Record], repeats: int = 3) -> tuple[float, DetectionPipeline, int]:
    """Events/s through the default pipeline, records pre-decoded (best of `repeats` fresh runs)."""
    best = 0.0
    for _ in range(repeats):
        pipeline = DetectionPipeline.from_settings(DetectorSettings())
        incidents = 0
        gc.collect()
        start = time.process_time()
        for record in records:
            incidents += len(pipeline.process(record)[1])
        best = max(best, len(records) / (time.process_time() - start))
    return best, pipeline, incidents


def backtest_throughput(records: list[Record]) -> tuple[float, float]:
    """Events/s of the full backtest (read + decode + detect) over a JSON Lines file, and of
    reading and decoding that file alone (the baseline), each the best of three."""
    from streams.recording import read_recording, write_recording
    from trainguard.backtest.runner import run_backtest

    full = decode = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "fleet.jsonl"
        write_recording(path, iter(records))
        for _ in range(3):
            start = time.process_time()
            count = sum(1 for _ in read_recording(path))
            decode = max(decode, count / (time.process_time() - start))
            pipeline = DetectionPipeline.from_settings(DetectorSettings())
            start = time.process_time()
            result = run_backtest(path, pipeline)
            full = max(full, result.events / (time.process_time() - start))
    return full, decode


def state_memory(records: list[Record]) -> tuple[int, int, int]:
    """(pickled bytes, traced heap bytes, summed state_size) of a pipeline after the stream."""
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    pipeline = DetectionPipeline.from_settings(DetectorSettings())
    for record in records:
        pipeline.process(record)
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    heap = sum(s.size_diff for s in after.compare_to(before, "filename"))
    return len(pickle.dumps(pipeline)), heap, sum(d.state_size() for d in pipeline.detectors)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=128, help="nodes of 8 GPUs (default 128 = 1,024 GPUs)")
    parser.add_argument("--minutes", type=float, default=10.0, help="simulated minutes (default 10)")
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    gpus = args.nodes * 8
    records = simulate(args.nodes, args.minutes)
    print(f"fleet: {args.nodes} nodes x 8 GPUs = {gpus} GPUs, {args.minutes:g} simulated minutes, "
          f"{len(records):,} events")
    rate, pipeline, incidents = detector_throughput(records)
    print(f"detectors (default set + correlator, pre-decoded): {rate:,.0f} events per CPU-second, "
          f"{incidents} incidents")
    full, decode = backtest_throughput(records)
    print(f"backtest end to end (read + decode + detect):      {full:,.0f} events per CPU-second")
    print(f"decode-only baseline (read + decode):              {decode:,.0f} events per CPU-second; "
          f"ratios: backtest {full / decode:.2f}, detectors alone {rate / decode:.2f} "
          f"(load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")
    pickled, heap, entries = state_memory(records)
    per_k = 1000 / gpus
    print(f"detector state: {pickled * per_k / 1024:,.0f} KiB pickled and {heap * per_k / 1024:,.0f} KiB heap "
          f"per 1,000 GPUs ({entries:,} keyed entries for {gpus} GPUs)")


if __name__ == "__main__":
    main()
