"""The coordinator: run self-check stages cheapest first, stop at a culprit.

Stages, in order of cost: (1) `dcgmi diag` where DCGM is installed (absent
-> "unavailable", never "passed"); (2) an all-to-all within each machine;
(3) an all-gather between neighbouring machines; (4) a bitwise alignment
test of a reference step. The first stage that names a machine (some but
not all machines failing) ends the check. The SDC replay (`run_replay`)
runs one regrouping and reports which groups' summed gradients differ from
the exact reference. Ranks are `actions.selfcheck.worker` processes in one
gloo world; results come back as files (see the worker).
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from actions.selfcheck.reference import digest, full_gradient
from actions.selfcheck.worker import neighbour_pairs

DEFAULT_CHECKS = ("dcgm", "all_to_all", "all_gather", "bitwise")
STARTUP_GRACE_S = 90.0  # importing torch in N processes on a busy host is slow


@dataclass
class StageResult:
    """One stage's verdict: passed, failed, unavailable or skipped."""

    name: str
    status: str
    culprits: list[str] = field(default_factory=list)
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass
class SelfCheckReport:
    """The whole check: passed only if no stage named a machine."""

    passed: bool
    stage: str
    culprits: list[str]
    stages: list[StageResult]
    failed_groups: list[int] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON-ready values."""
        return asdict(self)


def run_hierarchy(machines: list[str], *, checks: list[str] | None = None, ppn: int = 2, timeout_s: float = 10.0,
                  workdir: Path | None = None) -> SelfCheckReport:
    """Run the hierarchical self-check over `machines` (ppn ranks per machine)."""
    checks = list(checks or DEFAULT_CHECKS)
    stages: list[StageResult] = []
    if "dcgm" in checks:
        stages.append(_dcgm(machines))
        if stages[-1].culprits:
            return _report(stages, checks)
    dist_stages = [c for c in checks if c in ("all_to_all", "all_gather", "bitwise")]
    if dist_stages:
        with _World(machines, ppn=ppn, stages=dist_stages, timeout_s=timeout_s, workdir=workdir) as world:
            for name in dist_stages:
                stages.append(_EVALUATE[name](machines, world.wait(name)))
                if stages[-1].culprits:
                    break
    return _report(stages, checks)


def run_replay(groups: list[list[str]], *, timeout_s: float = 10.0, workdir: Path | None = None) -> SelfCheckReport:
    """Replay the reference step with machines regrouped; name the failing groups."""
    machines = [m for g in groups for m in g]
    with _World(machines, ppn=1, stages=["replay"], timeout_s=timeout_s, workdir=workdir, groups=groups) as world:
        files = world.wait("replay")
    expected = digest(full_gradient())
    by_machine = {f["machine"]: f for f in files}
    failed = [i for i, g in enumerate(groups)
              if any(by_machine.get(m, {}).get("digest") != expected for m in g)]
    stage = StageResult("replay", "failed" if failed else "passed",
                        detail={"failed_groups": failed, "groups": groups})
    # A replay names groups, not machines: the machine is where two phases' failing groups meet.
    return SelfCheckReport(not failed, "replay", [], [stage], failed)


def _report(stages: list[StageResult], checks: list[str]) -> SelfCheckReport:
    named = next((s for s in stages if s.culprits), None)
    ran = {s.name for s in stages}
    stages += [StageResult(c, "skipped") for c in checks if c not in ran]
    if named is None:
        return SelfCheckReport(True, "", [], stages)
    return SelfCheckReport(False, named.name, named.culprits, stages)


def _dcgm(machines: list[str]) -> StageResult:
    exe = shutil.which("dcgmi")
    if exe is None:
        return StageResult("dcgm", "unavailable", detail={"why": "dcgmi not installed"})
    proc = subprocess.run([exe, "diag", "-r", "1"], capture_output=True, text=True, timeout=600)
    if proc.returncode == 0:
        return StageResult("dcgm", "passed")
    # dcgmi checks the GPUs of the host it runs on: the coordinating machine.
    return StageResult("dcgm", "failed", culprits=machines[:1], detail={"output": proc.stdout[-2000:]})


def _machine_failures(machines: list[str], files: list[dict[str, Any]], ppn: int) -> list[str]:
    ok = Counter(f["machine"] for f in files if f["status"] == "ok")
    return [m for m in machines if ok[m] < ppn]


def _named(machines: list[str], failing: list[str]) -> list[str]:
    """Failing machines name culprits only when some, not all, fail."""
    return failing if 0 < len(failing) < len(machines) else []


def _eval_all_to_all(machines: list[str], files: list[dict[str, Any]]) -> StageResult:
    ppn = max(1, len(files) and max(Counter(f["machine"] for f in files).values()))
    failing = _machine_failures(machines, files, ppn)
    return StageResult("all_to_all", "failed" if failing else "passed", _named(machines, failing),
                       {"failing": failing})


def _eval_all_gather(machines: list[str], files: list[dict[str, Any]]) -> StageResult:
    pair_ok = {f"{a}|{b}": True for a, b in neighbour_pairs(machines)}
    seen: Counter[str] = Counter()
    for f in files:
        for pair, outcome in f.get("pairs", {}).items():
            seen[pair] += 1
            pair_ok[pair] = pair_ok[pair] and outcome == "ok"
    for pair in pair_ok:  # a pair with a silent member failed too
        if seen[pair] < 2:
            pair_ok[pair] = False
    failing = [m for m in machines
               if all(not ok for pair, ok in pair_ok.items() if m in pair.split("|")) and len(machines) > 2]
    bad = [p for p, ok in pair_ok.items() if not ok]
    return StageResult("all_gather", "failed" if bad else "passed", _named(machines, failing), {"failed_pairs": bad})


def _eval_bitwise(machines: list[str], files: list[dict[str, Any]]) -> StageResult:
    digests: dict[str, set[str]] = {m: set() for m in machines}
    for f in files:
        digests[f["machine"]].add(f.get("digest", "missing"))
    votes = Counter(d for ds in digests.values() for d in ds)
    majority = votes.most_common(1)[0][0] if votes else ""
    failing = [m for m, ds in digests.items() if ds != {majority}]
    return StageResult("bitwise", "failed" if failing else "passed", _named(machines, failing),
                       {"digests": {m: sorted(ds) for m, ds in digests.items()}})


_EVALUATE = {"all_to_all": _eval_all_to_all, "all_gather": _eval_all_gather, "bitwise": _eval_bitwise}


class _World:
    """The worker processes of one self-check, killed on exit."""

    def __init__(self, machines: list[str], *, ppn: int, stages: list[str], timeout_s: float,
                 workdir: Path | None, groups: list[list[str]] | None = None) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="tg-selfcheck-") if workdir is None else None
        self.dir: Path = Path(self._tmp.name) if self._tmp is not None else Path(str(workdir))
        self.dir.mkdir(parents=True, exist_ok=True)
        self.size = len(machines) * ppn
        self.timeout_s = timeout_s
        spec = {"machines": machines, "ppn": ppn, "stages": stages, "timeout_s": timeout_s, "port": _free_port(),
                "out": str(self.dir), "groups": groups or []}
        (self.dir / "spec.json").write_text(json.dumps(spec))
        self._procs: list[subprocess.Popen[bytes]] = []
        self._deadline = time.monotonic() + STARTUP_GRACE_S

    def __enter__(self) -> _World:
        for rank in range(self.size):
            log = (self.dir / f"rank-{rank}.log").open("wb")
            self._procs.append(subprocess.Popen(
                [sys.executable, "-m", "actions.selfcheck.worker", str(self.dir / "spec.json"), str(rank)],
                stdout=log, stderr=subprocess.STDOUT))
        return self

    def wait(self, stage: str) -> list[dict[str, Any]]:
        """The ranks' files for `stage`, once all are in or its time is up."""
        self._deadline = max(self._deadline, time.monotonic()) + self.timeout_s * 3
        seen, last_new = 0, time.monotonic()
        while time.monotonic() < self._deadline:
            count = len(list(self.dir.glob(f"{stage}-*.json")))
            if count >= self.size or all(p.poll() is not None for p in self._procs):
                break
            if count > seen:
                seen, last_new = count, time.monotonic()
            elif seen and time.monotonic() - last_new > self.timeout_s * 1.5:
                break  # the peers of a silent rank have timed out and reported; it will not
            time.sleep(0.1)
        return [json.loads(p.read_text()) for p in sorted(self.dir.glob(f"{stage}-*.json"))]

    def __exit__(self, *exc: object) -> None:
        for proc in self._procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        if self._tmp is not None:
            self._tmp.cleanup()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
