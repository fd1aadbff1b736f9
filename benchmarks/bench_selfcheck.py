"""Self-check of N machines: fanned out per machine vs launched from one node.

Baseline: the old shape, one `trainguard selfcheck --command-json` (no
`node_rank`) that starts every machine's ranks itself, as one node's agent
used to. Fan-out: N `trainguard selfcheck` processes, each given its own
machine's command by `actions.selfcheck.fanout.machine_commands` (what each
agent runs), started together, then the pure verdict over their reports.

All "machines" share this one host, so the wall time cannot show what
spreading buys on a real fleet (there every machine brings its own cores);
what it does show is the cost per node: processes started and CPU seconds
charged to the node that runs them (each process's own rusage including
its reaped ranks). Run: `python -m benchmarks selfcheck [N ...]`.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from trainguard.actions.selfcheck.fanout import machine_commands
from trainguard.actions.settings import SelfCheckSettings
from trainguard.schemas.action_params import SelfCheck
from trainguard.schemas.codec import encode
from trainguard.schemas.records import ActionCommand
from trainguard.schemas.selfcheck import aggregate

CHECKS = ["all_to_all", "all_gather", "bitwise"]
PPN = 2
RESULTS = Path(__file__).parent / "results" / "selfcheck.json"


def _argv(command: ActionCommand) -> list[str]:
    return [sys.executable, "-m", "trainguard.cli", "selfcheck", "--command-json", encode(command).decode()]


def single_node(machines: list[str]) -> dict[str, Any]:
    """The old shape: one process on one node starts every machine's ranks."""
    cmd = ActionCommand(ts=time.time(), id="bench-single", action="self_check", job="bench", nodes=machines[:1],
                        params=SelfCheck(machines=machines, checks=CHECKS, procs_per_machine=PPN, timeout_s=10.0))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    out = subprocess.run(_argv(cmd), capture_output=True, text=True, timeout=900)
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    report = json.loads(out.stdout)
    return {"wall_s": wall, "node_cpu_s": cpu, "node_processes": len(machines) * PPN + 1, "passed": report["passed"]}


def fanned_out(machines: list[str]) -> dict[str, Any]:
    """Each machine's part in its own process (as each agent runs it), then the verdict."""
    settings = SelfCheckSettings(rendezvous_host="127.0.0.1", rendezvous_port=_free_port(), rendezvous_ports=1,
                                 procs_per_machine=PPN)
    base = ActionCommand(ts=time.time(), id="bench-fanout-" + os.urandom(16).hex(), action="self_check", job="bench",
                         nodes=machines, params=SelfCheck(machines=machines, checks=CHECKS, timeout_s=10.0))
    commands = machine_commands(base, machines, settings=settings, deadline=time.time() + 600)
    started = time.monotonic()
    procs = [subprocess.Popen(_argv(c), stdout=subprocess.PIPE, text=True) for c in commands]
    cpu, reports = [], {}
    for machine, proc in zip(machines, procs):
        stdout = proc.stdout.read() if proc.stdout else ""
        _, _, usage = os.wait4(proc.pid, 0)
        proc.returncode = 0  # reaped here, by wait4 (it returns the child's rusage with its ranks')
        cpu.append(usage.ru_utime + usage.ru_stime)
        reports[machine] = json.loads(stdout)["machine_report"]
    wall = time.monotonic() - started
    t0 = time.perf_counter()
    verdict = aggregate(machines, reports, checks=CHECKS, ppn=PPN)
    aggregate_us = (time.perf_counter() - t0) * 1e6
    return {"wall_s": wall, "node_cpu_s": max(cpu), "mean_node_cpu_s": sum(cpu) / len(cpu),
            "node_processes": PPN + 1, "aggregate_us": aggregate_us, "passed": verdict.passed}


def verdict_at_scale(n: int, ppn: int = 8) -> dict[str, Any]:
    """act's side at fleet size: the pure verdict over n synthetic machine reports (one bit flip)."""
    from trainguard.schemas.selfcheck import neighbour_pairs

    machines = [f"m{i}" for i in range(n)]
    pairs: dict[str, dict[str, str]] = {m: {} for m in machines}
    for a, b in neighbour_pairs(machines):
        pairs[a][f"{a}|{b}"] = pairs[b][f"{a}|{b}"] = "ok"
    reports: dict[str, dict[str, Any] | None] = {}
    for i, m in enumerate(machines):
        ranks = range(i * ppn, (i + 1) * ppn)
        digest = "flipped" if i == n // 2 else "d0"
        reports[m] = {"machine": m, "stages": {
            "all_to_all": [{"rank": r, "machine": m, "status": "ok"} for r in ranks],
            "all_gather": [{"rank": r, "machine": m, "status": "ok", "pairs": pairs[m]} for r in ranks],
            "bitwise": [{"rank": r, "machine": m, "status": "ok", "digest": digest} for r in ranks]}}
    t0 = time.perf_counter()
    verdict = aggregate(machines, reports, checks=CHECKS, ppn=ppn)
    took = time.perf_counter() - t0
    return {"machines": n, "ppn": ppn, "aggregate_ms": took * 1e3, "culprits": verdict.culprits}


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def main(argv: Sequence[str] | None = None) -> int:
    sizes = [int(a) for a in (argv or sys.argv[1:] or ["2", "4", "6"])]
    rows: list[dict[str, Any]] = []
    for n in (100, 1000, 10000):
        row = verdict_at_scale(n)
        print(f"verdict over {n} machines x {row['ppn']} ranks: {row['aggregate_ms']:.1f} ms "
              f"(named {row['culprits']}); load {os.getloadavg()[0]:.1f}", flush=True)
        rows.append({"verdict_at_scale": row})
    for n in sizes:
        machines = [f"m{i}" for i in range(n)]
        load = os.getloadavg()[0]
        old, new = single_node(machines), fanned_out(machines)
        rows.append({"machines": n, "ppn": PPN, "load": load, "single_node": old, "fan_out": new})
        print(f"N={n} ppn={PPN} load {load:.1f}: one node {old['wall_s']:.1f} s wall, {old['node_cpu_s']:.1f} CPU-s "
              f"and {old['node_processes']} processes on that node | fan-out {new['wall_s']:.1f} s wall "
              f"(x{new['wall_s'] / old['wall_s']:.2f}), busiest node {new['node_cpu_s']:.1f} CPU-s "
              f"(x{new['node_cpu_s'] / old['node_cpu_s']:.2f}), {new['node_processes']} processes per node; "
              f"verdict {new['aggregate_us']:.0f} us; passed {old['passed']}/{new['passed']}", flush=True)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
