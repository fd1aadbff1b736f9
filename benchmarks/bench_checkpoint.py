"""Fast recovery, measured: checkpoint overhead per step, backup bandwidth, restore per tier, restart paths.

Two real torch ranks (DDP over gloo on the CPU) train an MLP whose state
(fp32 parameters + Adam moments) is >= 200 MB per rank. In one run:

* overhead per step at every-step frequency, as a ratio against the same
  loop uninstrumented (blocks interleaved so drift cancels): own-memory tier
  alone, and own memory + peer backup;
* peer backup bandwidth (TCP, loopback here) and restore time per tier;
* fault -> first new step for: in-process restart (NaN -> roll back inside
  the live processes), process restart from memory (both processes killed
  and relaunched, state from /dev/shm), and today's path (relaunch + load
  the last `torch.save` checkpoint, plus the steps since it to redo).

Writes a JSON report `trainguard ettr-sim --costs` reads. No GPU here: the
pinned-memory / side-stream path is not measured by this script.

    python -m benchmarks checkpoint [--width 2048 --depth 6 --batch 128] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
WORKER = Path(__file__).with_name("ckpt_bench_worker.py")


def _launch(rank: int, store_port: int, base: Path, out: Path, args: argparse.Namespace,
            *extra: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": str(args.threads)}
    cmd = [sys.executable, str(WORKER), "--rank", str(rank), "--store", f"127.0.0.1:{store_port}",
           "--mem", str(base / f"mem{rank}"), "--disk", str(base / "disk"), "--durable", str(base / "durable"),
           "--out", str(out), "--width", str(args.width), "--depth", str(args.depth), "--batch", str(args.batch),
           "--rounds", str(args.rounds), "--block", str(args.block), *extra]
    return subprocess.Popen(cmd, env=env)


def _wait_files(paths: list[Path], procs: list[subprocess.Popen[bytes]], timeout_s: float) -> None:
    deadline = time.time() + timeout_s
    while not all(p.exists() for p in paths):
        if any(p.poll() not in (None, 0) for p in procs) or time.time() > deadline:
            raise RuntimeError("a benchmark worker failed or timed out")
        time.sleep(0.1)


def run(args: argparse.Namespace) -> dict[str, Any]:
    import torch.distributed as dist

    base = Path("/dev/shm" if Path("/dev/shm").is_dir() else "/tmp") / f"trainguard-bench-{uuid.uuid4().hex[:8]}"
    disk = Path(args.disk_root).resolve() / base.name
    for d in ("disk", "durable"):
        (disk / d).mkdir(parents=True, exist_ok=True)
        base.mkdir(parents=True, exist_ok=True)
        (base / d).symlink_to(disk / d)  # disk tiers live on a real disk, memory tiers in /dev/shm
    store = dist.TCPStore("127.0.0.1", 0, None, True, timedelta(seconds=300), wait_for_workers=False)
    try:
        outs = [base / f"r{r}.json" for r in range(2)]
        procs = [_launch(r, store.port, base, outs[r], args) for r in range(2)]
        _wait_files(outs, procs, args.timeout_s)
        reports = [json.loads(o.read_text()) for o in outs]
        for p in procs:  # the machines' processes die (say, a CUDA error): a process restart is needed
            p.send_signal(signal.SIGKILL)
            p.wait()
        restarts = {}
        for mode in ("memory", "file"):
            res = [base / f"{mode}{r}.json" for r in range(2)]
            t0 = time.time()
            procs = [_launch(r, store.port, base, res[r], args, "--resume", mode) for r in range(2)]
            for p in procs:
                if p.wait(timeout=args.timeout_s) != 0:
                    raise RuntimeError(f"resume from {mode} failed")
            got = [json.loads(r.read_text()) for r in res]
            restarts[mode] = {"fault_to_first_step_s": max(g["first_step_at"] for g in got) - t0,
                              "restored_step": got[0]["restored_step"], "tier": got[0]["tier"]}
    finally:
        shutil.rmtree(base, ignore_errors=True)
        shutil.rmtree(disk, ignore_errors=True)
    return summarise(reports, restarts, args)


def summarise(reports: list[dict[str, Any]], restarts: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    r0 = reports[0]
    step_s = max(r["overhead"]["base"]["median_s"] for r in reports)
    overhead = {mode: max(r["overhead"][mode]["median_s"] / r["overhead"]["base"]["median_s"] - 1 for r in reports)
                for mode in ("memory", "memory+peer")}
    cpu = {mode: max(r["overhead"][mode]["cpu_per_step_s"] for r in reports) for mode in r0["overhead"]}
    blocked = {mode: max(r["overhead"][mode]["blocked_per_step_s"] for r in reports) for mode in r0["overhead"]}
    ckpt_every = args.file_ckpt_every
    return {
        "load": os.getloadavg(), "cores": os.cpu_count(), "state_mb_per_rank": r0["state_bytes"] / 1e6,
        "step_s": step_s, "overhead_ratio": overhead, "cpu_per_step_s": cpu,
        "blocked_ratio": {m: blocked[m] / step_s for m in ("memory", "memory+peer")},
        "skipped": [r["stats"] for r in reports],
        "backup_MBps": r0["backup_MBps"], "restore_s": r0["restore_s"], "blocking_save_s": r0["blocking_save_s"],
        "restart_s": {
            "in_process": r0["inprocess"]["fault_to_first_step_s"],
            "process_from_memory": restarts["memory"]["fault_to_first_step_s"],
            "process_from_last_checkpoint": restarts["file"]["fault_to_first_step_s"],
        },
        "recompute_s": {"every_step": step_s / 2, f"file_every_{ckpt_every}": ckpt_every * step_s / 2},
        "restored_tiers": {"in_process": r0["inprocess"]["tier"], "process_from_memory": restarts["memory"]["tier"]},
        "in_process_reinit_and_restore_s": r0["inprocess"]["reinit_and_restore_s"],
        "gpu": "not measured: no GPU machine was lent (pinned memory and side-stream copies untested)",
    }


def print_report(rep: dict[str, Any]) -> None:
    load = ", ".join(f"{x:.1f}" for x in rep["load"])
    print(f"state {rep['state_mb_per_rank']:.0f} MB/rank, 2 ranks DDP/gloo on {rep['cores']} CPU cores, load {load}")
    print(f"uninstrumented step (baseline): {rep['step_s'] * 1e3:.0f} ms")
    for mode, ratio in rep["overhead_ratio"].items():
        print(f"  every-step checkpoint, {mode:<12} overhead {ratio * 100:+.1f}% of step time "
              f"(CPU/step {rep['cpu_per_step_s'][mode]:.3f} s vs {rep['cpu_per_step_s']['base']:.3f} s; "
              f"training thread blocked {rep['blocked_ratio'][mode] * 100:.2f}% of the step)")
    print(f"peer backup bandwidth: {rep['backup_MBps']:.0f} MB/s")
    print("restore time per tier: " + ", ".join(f"{t} {s:.2f} s" for t, s in rep["restore_s"].items()))
    print(f"today's blocking torch.save: {rep['blocking_save_s']:.2f} s")
    print("fault -> first new step: " + ", ".join(f"{k} {v:.2f} s" for k, v in rep["restart_s"].items()))
    print("  plus recompute: " + ", ".join(f"{k} {v:.2f} s" for k, v in rep["recompute_s"].items()))
    print(rep["gpu"])


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench_checkpoint", description=__doc__)
    p.add_argument("--width", type=int, default=2048)
    p.add_argument("--depth", type=int, default=6, help="6 x 2048^2 fp32 + Adam = 302 MB of state per rank")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--block", type=int, default=4)
    p.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    p.add_argument("--file-ckpt-every", type=int, default=20, help="today's checkpoint interval in steps (demo)")
    p.add_argument("--disk-root", default=".trainguard/bench")
    p.add_argument("--timeout-s", type=float, default=900)
    p.add_argument("--out", type=Path, default=Path(".trainguard/bench/checkpoint.json"))
    args = p.parse_args(argv)
    rep = run(args)
    print_report(rep)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(rep, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
