"""Detector memory per 1,000 ranks, and where it stops growing (the per-rank bound).

One job with ever more ranks is fed through the default detection pipeline
(every built-in detector): each rank reports a few steps with a heartbeat.
Memory is the Python heap the pipeline holds (tracemalloc), measured from
the freshly built pipeline (the baseline, 0 bytes), at several rank counts below and above
`detectors.common.MAX_RANKS`. Below the bound it grows linearly (the figure
per 1,000 ranks); above it, it stays flat and the evictions are counted.

    python -m benchmarks memory [--ranks 8000,16000,32000,64000]
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import tracemalloc
from collections.abc import Sequence

import trainguard.detectors.common as common
from trainguard.detectors.common import bounded_evictions
from trainguard.detectors.pipeline import DetectionPipeline
from trainguard.detectors.settings import DetectorSettings
from trainguard.schemas.records import Heartbeat, TrainingStep


def feed(pipe: DetectionPipeline, ranks: int, steps: int = 3) -> None:
    for step in range(steps):
        for rank in range(ranks):
            ts = 1000.0 + step + rank * 1e-6
            node = f"n{rank // 8}"
            pipe.process(TrainingStep(ts=ts, job="wide", rank=rank, node=node, step=step, loss=2.0,
                                      step_time_s=1.0, compute_time_s=0.8))
            if step == steps - 1:
                pipe.process(Heartbeat(ts=ts, job="wide", rank=rank, node=node, step=step))


def held_bytes(ranks: int) -> tuple[int, int, int]:
    """(bytes held after feeding `ranks` ranks, entries, evictions)."""
    gc.collect()
    tracemalloc.start()
    pipe = DetectionPipeline.from_settings(DetectorSettings())
    base, _ = tracemalloc.get_traced_memory()
    feed(pipe, ranks)
    gc.collect()
    held, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    entries = sum(d.state_size() for d in pipe.detectors)
    evicted = sum(bounded_evictions(d) for d in pipe.detectors)
    return held - base, entries, evicted


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench_memory")
    parser.add_argument("--ranks", default="4000,16000,32000,64000")
    args = parser.parse_args(list(argv or []))
    counts = [int(x) for x in args.ranks.split(",")]
    print(f"detector memory, one job, default pipeline, MAX_RANKS={common.MAX_RANKS}; "
          f"load {os.getloadavg()[0]:.2f}")
    for n in counts:
        held, entries, evicted = held_bytes(n)
        per_1000 = held / max(1, min(n, common.MAX_RANKS)) * 1000 / 2**20
        print(f"  {n:6d} ranks: {held / 2**20:7.2f} MiB held = {per_1000:5.2f}"
              f" MiB per 1,000 ranks kept; {entries} entries, {evicted} evicted")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
