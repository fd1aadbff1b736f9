"""Every machine's part of a self-check, run on this one host.

In production a self-check fans out: act sends each machine's agent its own
command (`actions.selfcheck.fanout`) and each runs only its own ranks
(`collectors.agent.selfcheck.machine`). This module runs all the machines' parts
side by side on one host instead, for the cases where there is only one
host: `trainguard selfcheck --machines NODE` in Slurm's health check (one
machine), an operator trying the check by hand, and the tests and the
benchmark's baseline. The verdict is the same pure aggregation
(`schemas.selfcheck`) act applies to the fanned-out reports.
"""

from __future__ import annotations

import os
import socket
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from trainguard.collectors.agent.selfcheck.machine import STARTUP_GRACE_S, MachineSpec, run_machine
from trainguard.schemas.selfcheck import DEFAULT_CHECKS, SelfCheckReport, aggregate, aggregate_replay


def run_hierarchy(machines: list[str], *, checks: list[str] | None = None, ppn: int = 2, timeout_s: float = 10.0,
                  workdir: Path | None = None) -> SelfCheckReport:
    """Run the hierarchical self-check over `machines` (ppn ranks each), all on this host."""
    checks = list(checks or DEFAULT_CHECKS)
    reports = _run_all(machines, checks=checks, ppn=ppn, timeout_s=timeout_s, workdir=workdir)
    return aggregate(machines, reports, checks=checks, ppn=ppn)


def run_replay(groups: list[list[str]], *, timeout_s: float = 10.0, workdir: Path | None = None) -> SelfCheckReport:
    """Replay the reference step with machines regrouped, all on this host; name the failing groups."""
    machines = [m for g in groups for m in g]
    reports = _run_all(machines, checks=["replay"], ppn=1, timeout_s=timeout_s, workdir=workdir, groups=groups)
    return aggregate_replay(groups, reports)


def local_budget_s(timeout_s: float, stages: int) -> float:
    """How long a whole check may take: start-up, then each stage's collective timeouts."""
    return STARTUP_GRACE_S + timeout_s * 4 * max(1, stages) + 30.0


def _run_all(machines: list[str], *, checks: list[str], ppn: int, timeout_s: float, workdir: Path | None,
             groups: list[list[str]] | None = None) -> dict[str, dict[str, Any] | None]:
    deadline = time.time() + local_budget_s(timeout_s, len(checks))
    check_id, port = uuid.uuid4().hex, _free_port()
    with tempfile.TemporaryDirectory(prefix="tg-selfcheck-") as tmp:
        root = Path(str(workdir)) if workdir is not None else Path(tmp)
        specs = [MachineSpec(check_id=check_id, machines=machines, node_rank=i, ppn=ppn, checks=checks,
                             host="127.0.0.1", port=port, deadline=deadline, timeout_s=timeout_s,
                             groups=groups or []) for i in range(len(machines))]
        with ThreadPoolExecutor(max_workers=max(1, len(specs))) as pool:
            done = pool.map(lambda s: run_machine(s, workdir=root / f"m{s.node_rank}", env=dict(os.environ)), specs)
            return dict(zip(machines, done))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
