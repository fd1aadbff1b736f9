"""Fast-recovery costs from a `benchmarks/bench_checkpoint.py` report instead of assumptions.

What carries over from the benchmark to a big job, and what does not:

* the checkpoint overhead ratio (per rank, it does not grow with the job:
  each rank copies its own shard and backs it up to one peer);
* every-step checkpoints make the progress lost to a fault one step at most,
  so trainguard's checkpoint interval becomes the job's step time;
* the in-process restart time (NaN rollback) and the process restart from
  memory (every other restart) are the benchmark's fault -> first new step.
  A 2-rank benchmark does not pay a 1,200-node rendezvous or NCCL
  initialisation, so `--restart-floor-s` adds that part back (default: none).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from trainguard.lab.ettr_sim.params import ParamError, SimParams


def with_measured_recovery(params: SimParams, report: Path | str, *, restart_floor_s: float = 0.0,
                           overhead: float | None = None) -> SimParams:
    """`params` with trainguard's checkpoint and restart costs taken from a checkpoint benchmark report."""
    path = Path(report)
    if not path.is_file():
        raise ParamError(f"--costs: checkpoint benchmark report {path} not found")
    try:
        data: dict[str, Any] = json.loads(path.read_text())
        restart = data["restart_s"]
        in_process = float(restart["in_process"])
        from_memory = float(restart["process_from_memory"])
        measured = max(0.0, float(data["overhead_ratio"]["memory+peer"]))
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise ParamError(f"--costs: {path} is not a bench_checkpoint report (needs restart_s and "
                         f"overhead_ratio): {exc}") from None
    costs = replace(params.trainguard, checkpoint_interval_s=params.job.step_time_s,
                    inprocess_restart_s=in_process + restart_floor_s, restart_s=from_memory + restart_floor_s,
                    checkpoint_overhead=measured if overhead is None else overhead)
    if costs.checkpoint_overhead < 0:
        raise ParamError(f"--checkpoint-overhead: must be >= 0 (got {costs.checkpoint_overhead})")
    return replace(params, trainguard=costs)
