"""Overhead of the training hook on a 100 ms step, and the cost of the parameter checksum.

Two figures for the hook, against the 1% target:

* main-thread cost: the time `monitor.step()` itself takes (what the loop waits for);
* total CPU cost: the process CPU time burnt by the hook per step, including its
  background publisher and heartbeat threads. The "training" here sleeps for
  its 100 ms, so nearly all CPU time measured is the hook's.

Each is measured with a null sink (the hook alone) and with the real Kafka
publisher (needs the broker on 127.0.0.1:9092 or `--servers`), whose
write-ahead spool commits every record before `publish()` returns: once with
`sync="process"` (the default) and once with `sync="always"` (fsync per record). The checksum
is timed on its own, per model size, and shown amortised over
`checksum_every` steps. Prints figures; asserts nothing.

    python -m benchmarks hook [--steps 200] [--servers HOST:PORT]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

STEP_S = 0.1


class NullSink:
    """Drops records: measures the hook alone."""

    def publish(self, record: Any) -> None:
        pass

    def close(self, timeout_s: float = 10.0) -> bool:
        return True


def measure_hook(sink: Any, *, steps: int, model: Any) -> dict[str, float]:
    """Run `steps` sleeping 100 ms steps under a monitor; return per-step costs in seconds."""
    from trainguard.training_hook import TrainingMonitor

    mon = TrainingMonitor(job="bench", model=model, publisher=sink, checksum_every=0, heartbeat_interval_s=1.0,
                          install_stack_signal=False, peak_flops=1e15, env={"NODE_NAME": "bench"})
    calls: list[float] = []
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for i in range(steps):
        time.sleep(STEP_S)
        t0 = time.perf_counter()
        mon.step(loss=1.0 / (i + 1), tokens=4096, grad_norm=0.5)
        calls.append(time.perf_counter() - t0)
    mon.close()
    cpu = time.process_time() - cpu0
    wall = time.perf_counter() - wall0
    calls.sort()
    return {"call_p50_s": statistics.median(calls), "call_p99_s": calls[int(len(calls) * 0.99) - 1],
            "cpu_per_step_s": cpu / steps, "wall_s": wall}


def measure_checksum(n_params: int, repeats: int = 3) -> float:
    """Seconds to checksum a model of `n_params` float32 parameters (CPU)."""
    import torch

    from trainguard.training_hook import param_checksum

    model = torch.nn.Linear(n_params // 1024, 1024, bias=False)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        param_checksum(model.parameters())
        times.append(time.perf_counter() - t0)
    return min(times)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench_hook")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--servers", default="127.0.0.1:9092")
    parser.add_argument("--checksum-every", type=int, default=100)
    args = parser.parse_args(list(argv or []))

    import torch

    from trainguard.collectors.publisher import Publisher
    from trainguard.schemas.topics import Topics

    model = torch.nn.Linear(256, 256)
    print(f"hook overhead, {args.steps} steps of {STEP_S * 1000:.0f} ms (target <= 1% = {STEP_S * 10:.1f} ms/step)")
    rows: list[tuple[str, dict[str, float]]] = [("null sink", measure_hook(NullSink(), steps=args.steps, model=model))]
    delivered, sent = True, 0
    for sync in ("process", "always"):  # write-ahead: durable against a killed process / a power cut
        with tempfile.TemporaryDirectory() as spool:
            pub = Publisher(servers=args.servers, topics=Topics(f"bench-{uuid.uuid4().hex[:6]}."),
                            spool_dir=Path(spool), linger_s=1.0, sync=sync)  # as the hook's default publisher
            rows.append((f"kafka, wal={sync}", measure_hook(pub, steps=args.steps, model=model)))
            delivered = pub.close(timeout_s=30) and delivered
            sent += pub.stats()["sent"]
    for name, r in rows:
        print(f"  {name:16s} step() p50 {r['call_p50_s'] * 1e6:7.1f} us  p99 {r['call_p99_s'] * 1e6:7.1f} us  "
              f"total CPU {r['cpu_per_step_s'] * 1e3:6.3f} ms/step = {r['cpu_per_step_s'] / STEP_S * 100:5.2f}% "
              f"of a {STEP_S * 1000:.0f} ms step")
    print(f"  kafka publisher delivered {sent} records ({'all' if delivered else 'NOT all; broker down?'})")

    print(f"parameter checksum (exact int64 sums of the raw bits, CPU float32), amortised at checksum_every="
          f"{args.checksum_every}:")
    for n in (1 << 20, 10 << 20, 100 << 20):
        cost = measure_checksum(n)
        share = cost / args.checksum_every / STEP_S * 100
        print(f"  {n / 1e6:6.1f} M params ({n * 4 / 1e6:5.0f} MB): {cost * 1e3:8.1f} ms per checksum = "
              f"{share:5.2f}% of step time amortised; {n * 4 / cost / 1e9:4.2f} GB/s")
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
