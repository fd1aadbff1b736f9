"""One machine's share of a self-check: run its own ranks, report what they saw.

The agent on each machine runs `trainguard selfcheck --command-json` with
its own command (see `actions.selfcheck.fanout`), which calls `run_machine`:
`dcgmi diag` on this machine's GPUs where DCGM is installed, then this
machine's `ppn` worker ranks (global ranks `node_rank * ppn ...`), which
join the other machines' ranks in one gloo world through the rendezvous the
command names (global rank 0, on the first machine, hosts the TCP store).
Ranks write one JSON file per stage; this module waits for its own ranks'
files, never longer than the check's deadline, and returns them all. It
judges nothing across machines: that is `schemas.selfcheck`'s job,
in act, over every machine's report.

No torch here: only the worker processes import it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainguard.schemas.action_params import MachineCheck
from trainguard.schemas.selfcheck import DIST_STAGES

STARTUP_GRACE_S = 90.0  # importing torch in several processes on a busy host is slow
MARGIN_S = 2.0  # report this long before the deadline, so the answer reaches act in time


@dataclass
class MachineSpec:
    """What one machine's agent needs to run its part (all from the signed command)."""

    check_id: str
    machines: list[str]
    node_rank: int
    ppn: int
    checks: list[str]
    host: str
    port: int
    deadline: float  # wall-clock time by which the report must be out
    timeout_s: float = 10.0  # one collective's timeout
    groups: list[list[str]] = field(default_factory=list)  # replay groupings

    @property
    def machine(self) -> str:
        """The machine this spec is for."""
        return self.machines[self.node_rank]

    @property
    def local_ranks(self) -> list[int]:
        """The global ranks this machine runs."""
        return list(range(self.node_rank * self.ppn, (self.node_rank + 1) * self.ppn))

    @classmethod
    def from_check(cls, check: MachineCheck) -> MachineSpec:
        """From a fanned-out command's parameters (checked when the command was decoded)."""
        return cls(check_id=check.check_id, machines=list(check.machines), node_rank=check.node_rank,
                   ppn=check.procs_per_machine, checks=list(check.checks), host=check.rendezvous.host,
                   port=check.rendezvous.port, deadline=check.deadline, timeout_s=check.timeout_s,
                   groups=[list(g) for g in check.groups])


def run_machine(spec: MachineSpec, *, workdir: Path | None = None, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run this machine's part of the check; the report `verdict.aggregate` reads."""
    report: dict[str, Any] = {"check_id": spec.check_id, "machine": spec.machine, "node_rank": spec.node_rank,
                              "pid": os.getpid(), "agent_pid": os.getppid(), "stages": {}}
    if "dcgm" in spec.checks:
        report["dcgm"] = _dcgm(spec.deadline)
    stages = [c for c in spec.checks if c in DIST_STAGES]
    if not stages:
        return report
    tmp = tempfile.TemporaryDirectory(prefix="tg-selfcheck-") if workdir is None else None
    out = Path(tmp.name) if tmp is not None else Path(str(workdir))
    out.mkdir(parents=True, exist_ok=True)
    procs = _launch(spec, stages, out, env)
    try:
        report["ranks"] = {rank: proc.pid for rank, proc in zip(spec.local_ranks, procs)}
        waiter = _Waiter(spec, out, procs)
        for stage in stages:
            report["stages"][stage] = waiter.wait(stage)
        for marker in sorted(out.glob("stopped-*.json")):  # rank 0 named a machine: later stages never ran
            stop = json.loads(marker.read_text())
            report["stopped_after"], report["referee_named"] = stop["after"], stop["named"]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        if tmp is not None:
            tmp.cleanup()
    return report


def machine_passed(report: dict[str, Any]) -> bool:
    """Did every one of this machine's ranks pass every stage it ran (its own view only)?"""
    if report.get("dcgm", {}).get("status") == "failed":
        return False
    records = [r for rs in report.get("stages", {}).values() for r in rs]
    expected = len(report.get("ranks", {})) * len(report.get("stages", {}))
    return len(records) == expected and all(r.get("status") == "ok" and r.get("ok", True) is True
                                            and all(v == "ok" for v in r.get("pairs", {}).values()) for r in records)


def _launch(spec: MachineSpec, stages: list[str], out: Path,
            env: dict[str, str] | None) -> list[subprocess.Popen[bytes]]:
    remaining = spec.deadline - time.time() - MARGIN_S
    worker_spec = {"check_id": spec.check_id, "machines": spec.machines, "ppn": spec.ppn, "stages": stages,
                   "timeout_s": spec.timeout_s, "host": spec.host, "port": spec.port, "out": str(out),
                   "groups": spec.groups, "rendezvous_s": max(1.0, min(STARTUP_GRACE_S, remaining / 2))}
    (out / "spec.json").write_text(json.dumps(worker_spec))
    procs = []
    for rank in spec.local_ranks:
        with (out / f"rank-{rank}.log").open("wb") as log:  # the child keeps its own copy of the descriptor
            procs.append(subprocess.Popen([sys.executable, "-m", "trainguard.collectors.agent.selfcheck.worker",
                                           str(out / "spec.json"), str(rank)],
                                          stdout=log, stderr=subprocess.STDOUT, env=env))
    return procs


class _Waiter:
    """Waits for this machine's ranks' files, stage by stage, within the check's deadline."""

    def __init__(self, spec: MachineSpec, out: Path, procs: list[subprocess.Popen[bytes]]) -> None:
        self.spec, self.out, self.procs = spec, out, procs
        self.budget_end = time.monotonic() + spec.deadline - time.time() - MARGIN_S  # monotonic from here on
        self.stage_end = time.monotonic() + min(STARTUP_GRACE_S, spec.deadline - time.time())

    def wait(self, stage: str) -> list[dict[str, Any]]:
        """The local ranks' records for `stage`, once all are in, the ranks are gone or time is up."""
        timeout = self.spec.timeout_s
        self.stage_end = min(max(self.stage_end, time.monotonic()) + timeout * 3, self.budget_end)
        seen, last_new = 0, time.monotonic()
        while time.monotonic() < self.stage_end:
            count = len(list(self.out.glob(f"{stage}-*.json")))
            if count >= len(self.procs) or all(p.poll() is not None for p in self.procs):
                break
            if any(self.out.glob("stopped-*.json")):
                break  # the check was stopped at an earlier stage: this one will never run
            if count > seen:
                seen, last_new = count, time.monotonic()
            elif seen and time.monotonic() - last_new > timeout * 1.5:
                break  # the peers of a silent rank have timed out and reported; it will not
            time.sleep(0.1)
        return [json.loads(p.read_text()) for p in sorted(self.out.glob(f"{stage}-*.json"))]


def _dcgm(deadline: float) -> dict[str, Any]:
    """`dcgmi diag -r 1` on this machine's GPUs: passed, failed, or unavailable (never a pass)."""
    exe = shutil.which("dcgmi")
    if exe is None:
        return {"status": "unavailable", "why": "dcgmi not installed"}
    try:
        proc = subprocess.run([exe, "diag", "-r", "1"], capture_output=True, text=True,
                              timeout=max(1.0, min(600.0, deadline - time.time() - MARGIN_S)))
    except subprocess.TimeoutExpired:
        return {"status": "failed", "output": "dcgmi diag did not finish before the check's deadline"}
    status = "passed" if proc.returncode == 0 else "failed"
    return {"status": status, "output": proc.stdout[-2000:]}

