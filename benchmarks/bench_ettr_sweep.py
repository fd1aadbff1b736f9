"""The standby pool against over-eviction at 9,600 and 100,000 GPUs, as docs/ettr-simulation.md quotes it.

Runs `trainguard ettr-sim --sweep` twice over the same dice: trainguard's
engine as it is (a group larger than the free pool requeues the job) and a
pool-aware variant (it diagnoses instead). Both use the fast-recovery costs
of `benchmarks/results/checkpoint.json` (every-step in-memory checkpoints),
ByteRobust's 0.9% checkpoint overhead and a restart floor that brings a
restart from memory to the 300 s the defaults assume for a big job. Prints
the tables, the time and CPU each sweep took, and the machine load; writes
the JSON, the Markdown tables and the plot under `--out`.

    python -m benchmarks ettr_sweep [--out out/ettr-sweep] [--seeds 5]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from trainguard.cli import main as cli

ROOT = Path(__file__).resolve().parent.parent
COSTS = ["--costs", str(ROOT / "benchmarks" / "results" / "checkpoint.json"), "--checkpoint-overhead", "0.009",
         "--restart-floor-s", "250"]
SWEEP = ["--sweep", "--sweep-nodes", "1200,12500", "--sweep-pools", "0,0.05,0.1,0.25,0.5,1,2",
         "--sweep-groups", "1,2,4,8,16"]


def run(variant: str, extra: list[str], out: Path, seeds: int) -> tuple[float, float]:
    """(wall, CPU) seconds of one sweep, which writes its files under `out`."""
    argv = ["ettr-sim", *SWEEP, *COSTS, *extra, "--seeds", str(seeds), "--json", str(out / f"{variant}.json"),
            "--markdown", str(out / f"{variant}.md"), "--plot", str(out / f"{variant}.png")]
    wall0, cpu0 = time.perf_counter(), time.process_time()
    code = cli(argv)
    if code != 0:
        raise SystemExit(code)
    return time.perf_counter() - wall0, time.process_time() - cpu0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench_ettr_sweep", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=ROOT / "out" / "ettr-sweep")
    parser.add_argument("--seeds", type=int, default=5)
    args = parser.parse_args(list(argv or []))
    args.out.mkdir(parents=True, exist_ok=True)
    timings = {name: run(name, extra, args.out, args.seeds)
               for name, extra in (("engine", []), ("pool-aware", ["--pool-aware"]))}
    for name, (wall, cpu) in timings.items():
        print(f"sweep {name}: 2 job sizes x 7 pools x 5 groups x {args.seeds} seeds in {wall:.1f} s wall, "
              f"{cpu:.1f} s CPU (one process); load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
