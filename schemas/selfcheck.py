"""The self-check verdict: pure aggregation of every machine's own report.

A self-check fans out: each machine's agent runs only its own check ranks
(`collectors.agent.selfcheck.machine`) and reports what they saw, per stage. This
module combines those per-machine reports into one hierarchical verdict:
stages are judged in order of cost (every agent answered, every rank met at
the rendezvous, dcgm, all-to-all within each machine,
all-gather between neighbours, bitwise alignment of a reference step) and
the first stage that names a machine ends the verdict; later stages are
"skipped" even if the machines ran them, because once a machine is named
nothing cheaper is left to learn.

No torch, no I/O, no clock: act and the nodes import it, and the same reports always
give the same verdict. A machine that did not answer (`None`) is a
finding, never a pass: it is named ahead of every stage, because an agent
that cannot report is the strongest sign of a hung or dead machine.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

DEFAULT_CHECKS = ("dcgm", "all_to_all", "all_gather", "bitwise")
DIST_STAGES = ("all_to_all", "all_gather", "bitwise", "replay")


@dataclass
class StageResult:
    """One stage's verdict: passed, failed, unavailable or skipped."""

    name: str
    status: str
    culprits: list[str] = field(default_factory=list)
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass
class SelfCheckReport:
    """The whole check: passed only if no stage failed (a failing stage may name no machine)."""

    passed: bool
    stage: str
    culprits: list[str]
    stages: list[StageResult]
    failed_groups: list[int] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON-ready values."""
        return asdict(self)


def neighbour_pairs(machines: list[str]) -> list[tuple[str, str]]:
    """Each machine with the next one, around a ring.

    >>> neighbour_pairs(["a", "b", "c"])
    [('a', 'b'), ('b', 'c'), ('c', 'a')]
    >>> neighbour_pairs(["a", "b"])
    [('a', 'b')]
    """
    if len(machines) < 2:
        return []
    if len(machines) == 2:
        return [(machines[0], machines[1])]
    return [(m, machines[(i + 1) % len(machines)]) for i, m in enumerate(machines)]


def aggregate(machines: list[str], reports: Mapping[str, Mapping[str, Any] | None], *,
              checks: list[str] | tuple[str, ...] = DEFAULT_CHECKS, ppn: int = 1) -> SelfCheckReport:
    """The hierarchical verdict from each machine's report (`None`: its agent never answered).

    A report is what `collectors.agent.selfcheck.machine.run_machine` returns:
    `{"machine", "dcgm": {"status"}, "stages": {stage: [rank records]}}`; an
    agent that answered without one (a re-sent command it had already run)
    gives `{"status": "ok"|"failed"}` only: the machines' own pass/fail then
    decides the check, which names no machine (nothing can be compared).
    """
    checks = list(checks)
    stages: list[StageResult] = []
    answered = _answers(machines, reports)
    if answered is not None:  # a silent machine, or answers without reports: nothing more can be judged
        stages.append(answered)
        return _report(stages, checks)
    full = {m: r for m, r in reports.items() if r is not None and "stages" in r}
    met = _rendezvous(machines, full, ppn)
    if met is not None:
        stages.append(met)
        return _report(stages, checks)
    if "dcgm" in checks:
        stages.append(_eval_dcgm(machines, full))
        if stages[-1].culprits:
            return _report(stages, checks)
    for name in (c for c in checks if c in _EVALUATE):
        files = [f for r in full.values() for f in r["stages"].get(name, [])]
        stages.append(_refereed(name, evaluate_stage(name, machines, files, ppn), machines, full))
        if stages[-1].culprits:
            break
    return _report(stages, checks)


def aggregate_replay(groups: list[list[str]], reports: Mapping[str, Mapping[str, Any] | None]) -> SelfCheckReport:
    """One replay phase: a group fails when a member computed a wrong sum or never answered.

    A replay names groups, not machines: the machine is where two phases'
    failing groups meet (`actions.replay.locate`).
    """
    ok: dict[str, bool] = {}
    for machine, report in reports.items():
        records = (report or {}).get("stages", {}).get("replay", [])
        ok[machine] = bool(records) and all(r.get("status") == "ok" and r.get("ok") is True for r in records)
    failed = [i for i, g in enumerate(groups) if not all(ok.get(m, False) for m in g)]
    silent = sorted(m for g in groups for m in g if reports.get(m) is None)
    stage = StageResult("replay", "failed" if failed else "passed",
                        detail={"failed_groups": failed, "groups": groups, "silent": silent})
    return SelfCheckReport(not failed, "replay", [], [stage], failed)


def _answers(machines: list[str], reports: Mapping[str, Mapping[str, Any] | None]) -> StageResult | None:
    """Stage zero: did every machine's agent answer, with its stage records?"""
    silent = [m for m in machines if reports.get(m) is None]
    bare = [m for m in machines if m not in silent and "stages" not in (reports[m] or {})]
    if not silent and not bare:
        return None
    if silent:
        # Some answered, or only one machine was asked: the silent ones are the suspects. When
        # every agent of several machines is silent, the fault is more likely act's or the bus's.
        named = silent if len(silent) < len(machines) or len(machines) == 1 else []
        return StageResult("agents", "failed", named, {"silent": silent})
    failed = [m for m in bare if (reports[m] or {}).get("status") != "ok"]
    return StageResult("agents", "failed" if failed else "passed", [],
                       {"without_report": bare, "failed_without_report": failed})


def _refereed(name: str, own: StageResult, machines: list[str],
              reports: Mapping[str, Mapping[str, Any]]) -> StageResult:
    """Rank 0's early-stop call for this stage, where act's own reading names no one (see `referee`)."""
    calls = {tuple(r["referee_named"]) for r in reports.values()
             if r.get("stopped_after") == name and r.get("referee_named")}  # [] : a late rank that never heard
    if own.culprits or len(calls) != 1:
        return own
    call = set(calls.pop())
    named = _named(machines, [m for m in machines if m in call])
    if not named:
        return own
    return StageResult(name, "failed", named, {**own.detail, "named_by": "rank 0, when the check stopped here"})


def _rendezvous(machines: list[str], reports: Mapping[str, Mapping[str, Any]], ppn: int) -> StageResult | None:
    """Did every rank reach the check's rendezvous? If not, whose ranks never came?

    Ranks that timed out there list the ranks that never arrived; when rank 0
    itself never came (no store to reach), the machines whose ranks wrote
    nothing at all while the others report rendezvous failures are the ones.
    """
    records = {m: [rec for rs in r["stages"].values() for rec in rs] for m, r in reports.items()}
    failed = [rec for rs in records.values() for rec in rs if rec.get("rendezvous_failed")]
    if not failed:
        return None
    missing_ranks = {int(x) for rec in failed for x in (rec.get("missing_ranks") or [])}
    absent = {machines[r // ppn] for r in missing_ranks if 0 <= r // ppn < len(machines)}
    absent |= {m for m in machines if m in records and not records[m]}
    named = [m for m in machines if m in absent]
    return StageResult("rendezvous", "failed", _named(machines, named),
                       {"missing_ranks": sorted(missing_ranks), "absent": named})


def _report(stages: list[StageResult], checks: list[str]) -> SelfCheckReport:
    ran = {s.name for s in stages}
    stages += [StageResult(c, "skipped") for c in checks if c not in ran]
    named = next((s for s in stages if s.culprits), None)
    if named is not None:
        return SelfCheckReport(False, named.name, named.culprits, stages)
    failed = next((s for s in stages if s.status == "failed"), None)
    return SelfCheckReport(failed is None, failed.name if failed else "", [], stages)


def _named(machines: list[str], failing: list[str]) -> list[str]:
    """Failing machines name culprits only when some, not all, fail."""
    return failing if 0 < len(failing) < len(machines) else []


def _eval_dcgm(machines: list[str], reports: Mapping[str, Mapping[str, Any]]) -> StageResult:
    """Each machine ran `dcgmi diag` on its own GPUs; absent DCGM is "unavailable", never "passed"."""
    status = {m: str(reports.get(m, {}).get("dcgm", {}).get("status", "missing")) for m in machines}
    failing = [m for m, s in status.items() if s in ("failed", "missing")]
    if failing:
        return StageResult("dcgm", "failed", _named(machines, failing), {"per_machine": status})
    if all(s == "unavailable" for s in status.values()):
        return StageResult("dcgm", "unavailable", detail={"why": "dcgmi not installed", "per_machine": status})
    return StageResult("dcgm", "passed", detail={"per_machine": status})


def _machine_failures(machines: list[str], files: list[dict[str, Any]], ppn: int) -> list[str]:
    ok = Counter(f["machine"] for f in files if f["status"] == "ok")
    return [m for m in machines if ok[m] < ppn]


def _eval_all_to_all(machines: list[str], files: list[dict[str, Any]], ppn: int) -> StageResult:
    failing = _machine_failures(machines, files, ppn)
    return StageResult("all_to_all", "failed" if failing else "passed", _named(machines, failing),
                       {"failing": failing})


def _eval_all_gather(machines: list[str], files: list[dict[str, Any]], ppn: int) -> StageResult:
    pair_ok = {f"{a}|{b}": True for a, b in neighbour_pairs(machines)}
    seen: Counter[str] = Counter()
    for f in files:
        for pair, outcome in f.get("pairs", {}).items():
            if pair in pair_ok:
                seen[pair] += 1
                pair_ok[pair] = pair_ok[pair] and outcome == "ok"
    for pair in pair_ok:  # a pair with a silent member failed too
        if seen[pair] < 2 * ppn:
            pair_ok[pair] = False
    outcomes: dict[str, list[bool]] = {m: [] for m in machines}  # each machine's pairs, in one pass
    for pair, ok in pair_ok.items():
        for m in pair.split("|"):
            outcomes[m].append(ok)
    failing = [m for m in machines if len(machines) > 2 and not any(outcomes[m])]
    bad = [p for p, ok in pair_ok.items() if not ok]
    return StageResult("all_gather", "failed" if bad else "passed", _named(machines, failing), {"failed_pairs": bad})


def _eval_bitwise(machines: list[str], files: list[dict[str, Any]], ppn: int) -> StageResult:
    digests: dict[str, set[str]] = {m: set() for m in machines}
    for f in files:
        if f["machine"] in digests:
            digests[f["machine"]].add(f.get("digest", "missing"))
    for ds in digests.values():
        if not ds:
            ds.add("missing")
    votes = Counter(d for ds in digests.values() for d in ds if d != "missing")
    majority = votes.most_common(1)[0][0] if votes else ""
    failing = [m for m, ds in digests.items() if ds != {majority}]
    return StageResult("bitwise", "failed" if failing else "passed", _named(machines, failing),
                       {"digests": {m: sorted(ds) for m, ds in digests.items()}})


_EVALUATE = {"all_to_all": _eval_all_to_all, "all_gather": _eval_all_gather, "bitwise": _eval_bitwise}


def evaluate_stage(stage: str, machines: list[str], records: list[dict[str, Any]], ppn: int) -> StageResult:
    """One collective stage judged from its rank records (the referee's early-stop call uses it too)."""
    return _EVALUATE[stage](machines, records, ppn)
