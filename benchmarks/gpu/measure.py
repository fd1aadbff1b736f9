"""Measure what the GPU run measures in-process: NVML against the device, hook + checkpoint per step.

    python -m benchmarks.gpu.measure --out DIR         # on a machine with an NVIDIA GPU
    python -m benchmarks.gpu.measure --out DIR --cpu   # the same code on the CPU: a dry run, no GPU needed

Writes DIR/measure.json. Without a GPU (and without --cpu) it stops at once
with one line and exit code 2. `benchmarks/gpu/run.sh` calls it, then the
scale-out benchmark, then `benchmarks.gpu.summary`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.gpu import nvml_probe, step_overhead

CPU_SHAPE = step_overhead.Shape(width=128, hidden=512, depth=2, tokens=256, rounds=2, block=3)


def device_info(cpu: bool) -> dict[str, Any]:
    import torch

    info: dict[str, Any] = {"torch": torch.__version__, "cuda": torch.version.cuda, "python": platform.python_version(),
                            "cores": len(os.sched_getaffinity(0)), "load_average": os.getloadavg()[0]}
    if not cpu:
        props = torch.cuda.get_device_properties(0)
        info.update(gpu=torch.cuda.get_device_name(0), gpu_count=torch.cuda.device_count(),
                    gpu_memory_gb=round(props.total_memory / 1e9, 1), capability=f"{props.major}.{props.minor}")
    return info


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu.measure", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--cpu", action="store_true", help="dry run on the CPU (small model, few steps)")
    parser.add_argument("--nvml-samples", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--block", type=int, default=8, help="steps per mode per round")
    parser.add_argument("--target-step-s", type=float, default=0.5)
    parser.add_argument("--depth", type=int, default=12, help="MLP blocks (12: 400 M params, 4.8 GB of state)")
    args = parser.parse_args(argv)

    import torch

    if not args.cpu and not torch.cuda.is_available():
        print("benchmarks.gpu.measure: torch sees no CUDA device (run it on a GPU machine, or pass --cpu for "
              "the dry run)", file=sys.stderr)
        return 2
    if args.cpu:
        torch.set_num_threads(1)  # a small model on shared cores: more threads only add contention
    shape = CPU_SHAPE if args.cpu else step_overhead.Shape(rounds=args.rounds, block=args.block,
                                                            target_step_s=args.target_step_s, depth=args.depth)
    t0 = time.perf_counter()
    report = {"cpu_dry_run": args.cpu, "machine": device_info(args.cpu),
              "nvml": nvml_probe.probe(samples=args.nvml_samples),
              "steps": step_overhead.measure(shape, "cpu" if args.cpu else "cuda")}
    report["seconds"] = round(time.perf_counter() - t0, 1)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "measure.json").write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out / 'measure.json'} ({report['seconds']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
