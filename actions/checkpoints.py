"""Which checkpoints each job has, and which one to restore.

Built from checkpoint announcements only: a checkpoint counts once it is
`saved`; a later `failed`/`invalid` announcement for the same step removes
it. Restoring "before the onset" means the newest saved checkpoint whose
step is strictly below the first bad step (or whose time precedes the onset).
"""

from __future__ import annotations

import bisect
from dataclasses import asdict, dataclass, field
from typing import Any

import msgspec

from trainguard.actions.restore import RestorePlan, TierIndex
from trainguard.schemas.action_params import RestoreTier
from trainguard.schemas.bounded import Bounded
from trainguard.schemas.records import CheckpointEvent


@dataclass(frozen=True)
class Checkpoint:
    """A saved checkpoint."""

    job: str
    step: int
    path: str
    ts: float
    code_version: str = ""
    tiers: dict[str, RestoreTier] | None = None  # per-rank tier choice when the checkpoint manager's copies won


def _from_plan(plan: RestorePlan | None) -> Checkpoint | None:
    if plan is None:
        return None
    return Checkpoint(plan.job, plan.step, plan.path, plan.ts, tiers=plan.restore_tiers())


def _newer(legacy: Checkpoint | None, tiered: Checkpoint | None) -> Checkpoint | None:
    """The later step; on a tie the tiered copy (memory beats remote storage)."""
    if legacy is None or (tiered is not None and tiered.step >= legacy.step):
        return tiered or legacy
    return legacy


@dataclass
class _JobCheckpoints:
    steps: list[int] = field(default_factory=list)
    by_step: dict[int, Checkpoint] = field(default_factory=dict)


class CheckpointRegistry:
    """Per-job sorted index of saved checkpoints.

    >>> from trainguard.schemas.records import CheckpointEvent
    >>> reg = CheckpointRegistry()
    >>> reg.observe(CheckpointEvent(ts=1.0, job="j", step=100, path="/c/100"))
    >>> reg.observe(CheckpointEvent(ts=2.0, job="j", step=200, path="/c/200"))
    >>> reg.latest_before("j", step=150).path
    '/c/100'

    After a restore to step 100 the job saves step 150 again: the old step 200
    is from the abandoned timeline and is dropped.

    >>> reg.observe(CheckpointEvent(ts=3.0, job="j", step=150, path="/c/150b"))
    >>> reg.latest("j").path
    '/c/150b'
    """

    def __init__(self, *, max_jobs: int = 4096, max_per_job: int = 256) -> None:
        # Bounded: a long job saves thousands of checkpoints and a fleet runs endless jobs;
        # only the newest few per job are ever restored, and a job not heard of for
        # `max_jobs` other jobs has finished.
        self._jobs: Bounded[str, _JobCheckpoints] = Bounded(max_jobs)
        self.max_per_job = max_per_job
        self.trimmed = 0  # old checkpoints forgotten past `max_per_job`
        self.tiers = TierIndex(keep_steps=max_per_job)

    @property
    def evicted(self) -> int:
        """Jobs and checkpoints forgotten to keep the registry bounded (for metrics)."""
        return self._jobs.evicted + self.trimmed

    def observe(self, event: CheckpointEvent) -> None:
        """Apply one announcement (per-tier copies from the checkpoint manager go to `tiers`)."""
        if event.tier:
            self.tiers.observe(event)
            return
        job = self._jobs.get(event.job)
        if job is None:
            job = self._jobs[event.job] = _JobCheckpoints()
        if event.status == "saved":
            self._drop_abandoned(job, event)
            if event.step not in job.by_step:
                bisect.insort(job.steps, event.step)
            job.by_step[event.step] = Checkpoint(event.job, event.step, event.path, event.ts, event.code_version)
            while len(job.steps) > self.max_per_job:
                del job.by_step[job.steps.pop(0)]
                self.trimmed += 1
        elif event.status in ("failed", "invalid") and event.step in job.by_step:
            del job.by_step[event.step]
            job.steps.remove(event.step)

    @staticmethod
    def _drop_abandoned(job: _JobCheckpoints, event: CheckpointEvent) -> None:
        """A save at step S after saves of later steps means the job went back (a restore):
        the later checkpoints belong to the abandoned timeline and must never be restored."""
        cut = bisect.bisect_right(job.steps, event.step)
        stale = [s for s in job.steps[cut:] if job.by_step[s].ts < event.ts]
        for step in stale:
            del job.by_step[step]
            job.steps.remove(step)

    def snapshot(self, job: str) -> dict[str, Any]:
        """One job's saved checkpoints (and tiered copies) as plain data, for the journal."""
        entry = self._jobs.get(job)
        rows = [] if entry is None else [asdict(entry.by_step[s]) for s in entry.steps]
        return {"checkpoints": rows, "tiers": self.tiers.snapshot(job)}

    def restore(self, job: str, state: dict[str, Any]) -> None:
        """Inverse of `snapshot` (a restarted consumer knows every checkpoint the old one knew)."""
        entry = self._jobs[job] = _JobCheckpoints()
        for row in state.get("checkpoints", []):
            tiers = row.get("tiers")
            ckpt = Checkpoint(**{**row, "tiers": msgspec.convert(tiers, dict[str, RestoreTier]) if tiers else None})
            entry.by_step[ckpt.step] = ckpt
        entry.steps = sorted(entry.by_step)
        self.tiers.restore(job, state.get("tiers", {}))

    def latest(self, job: str, *, lost_nodes: set[str] | frozenset[str] = frozenset()) -> Checkpoint | None:
        """The newest saved checkpoint of a job (tiered copies on `lost_nodes` do not count)."""
        entry = self._jobs.get(job)
        legacy = entry.by_step[entry.steps[-1]] if entry is not None and entry.steps else None
        return _newer(legacy, _from_plan(self.tiers.plan(job, lost_nodes=lost_nodes)))

    def latest_before(self, job: str, *, step: int | None = None, ts: float | None = None) -> Checkpoint | None:
        """The newest checkpoint strictly before `step` (and saved before `ts`)."""
        tiered = _from_plan(self.tiers.plan(job, before=step, ts=ts))
        return _newer(self._legacy_before(job, step=step, ts=ts), tiered)

    def _legacy_before(self, job: str, *, step: int | None, ts: float | None) -> Checkpoint | None:
        entry = self._jobs.get(job)
        if entry is None:
            return None
        upper = len(entry.steps) if step is None else bisect.bisect_left(entry.steps, step)
        for i in range(upper - 1, -1, -1):
            ckpt = entry.by_step[entry.steps[i]]
            if ts is None or ckpt.ts <= ts:
                return ckpt
        return None

    def latest_with_code(self, job: str, *, exclude: str = "") -> Checkpoint | None:
        """The newest checkpoint written by a code version other than `exclude`.

        That version is the last good code a user error rolls back to.
        """
        entry = self._jobs.get(job) or _JobCheckpoints()
        legacy = next((entry.by_step[s] for s in reversed(entry.steps)
                       if entry.by_step[s].code_version and entry.by_step[s].code_version != exclude), None)
        plan = self.tiers.latest_with_code(job, exclude=exclude)
        tiered = _from_plan(plan)
        if tiered is not None and plan is not None:
            code = next(iter(plan.ranks.values())).code_version
            tiered = Checkpoint(tiered.job, tiered.step, tiered.path, tiered.ts, code, tiered.tiers)
        return _newer(legacy, tiered)
