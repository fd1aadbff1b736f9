"""Restore-tier selection: the newest step every shard can be loaded from, and from which tier.

Fed by the checkpoint manager's per-rank, per-tier announcements. A step
is *complete* when every rank 0..world_size-1 has at least one usable copy:
its own memory or local disk (usable unless its machine is being evicted),
its peer backup (usable unless the holder's machine is being evicted), or
the durable store (always). Among complete steps the newest one strictly
before the fault's first bad step wins (a NaN or SDC poisons everything from
its onset on); for each rank the fastest usable tier is chosen, and the plan
records it so the post-mortem can say where every rank restored from.

    >>> from trainguard.schemas.records import CheckpointEvent as E
    >>> idx = TierIndex()
    >>> for r, node in ((0, "a"), (1, "b")):
    ...     idx.observe(E(ts=1.0, job="j", step=7, path=f"mem://{node}", rank=r, tier="memory", world_size=2,
    ...                   node=node))
    >>> idx.observe(E(ts=1.1, job="j", step=7, path="tcp://a:1", rank=1, tier="peer", world_size=2, node="a"))
    >>> plan = idx.plan("j", lost_nodes={"b"})
    >>> plan.step, plan.ranks[0].tier, plan.ranks[1].tier
    (7, 'memory', 'peer')
"""

from __future__ import annotations

import bisect
from dataclasses import asdict, dataclass, field
from typing import Any

from trainguard.schemas.action_params import RestoreTier
from trainguard.schemas.bounded import Bounded
from trainguard.schemas.records import CheckpointEvent

PREFERENCE: tuple[str, ...] = ("memory", "disk", "peer", "durable")
# Memory and peer copies are announced every step and replaced within a step: a restarted action
# consumer learns them again at once, so only the lasting tiers are worth journaling.
JOURNALED: frozenset[str] = frozenset({"disk", "durable"})


@dataclass(frozen=True)
class Copy:
    """One rank's copy of one step in one tier."""

    tier: str
    location: str
    node: str
    checksum: str
    ts: float
    code_version: str = ""


@dataclass(frozen=True)
class RestorePlan:
    """The step to restore and, per rank, the copy to load it from."""

    job: str
    step: int
    ts: float
    ranks: dict[int, Copy]

    @property
    def path(self) -> str:
        """The checkpoint's name in a restart command (each rank's copy is in `restore_tiers`)."""
        return f"trainguard-ckpt://{self.job}/step-{self.step}"

    def restore_tiers(self) -> dict[str, RestoreTier]:
        """What a restart action carries (and the decision records): each rank's copy."""
        return {str(r): RestoreTier(tier=c.tier, location=c.location, node=c.node)
                for r, c in sorted(self.ranks.items())}


@dataclass
class _Job:
    world_size: int = 0
    steps: list[int] = field(default_factory=list)
    copies: dict[int, dict[int, dict[str, Copy]]] = field(default_factory=dict)  # step -> rank -> tier -> copy


class TierIndex:
    """Per job: which copies of which step exist where. Bounded: the newest `keep_steps` steps."""

    def __init__(self, keep_steps: int = 256, max_jobs: int = 4096) -> None:
        self.keep_steps = keep_steps
        self._jobs: Bounded[str, _Job] = Bounded(max_jobs)  # a finished job's copies age out

    def observe(self, event: CheckpointEvent) -> None:
        """Apply one tiered announcement (untiered ones are the job's own checkpoints: ignored here)."""
        if not event.tier or event.status not in ("saved", "failed", "invalid"):
            return
        job = self._jobs.get(event.job)
        if job is None:
            job = self._jobs[event.job] = _Job()
        job.world_size = max(job.world_size, event.world_size)
        if event.status != "saved":
            job.copies.get(event.step, {}).get(event.rank, {}).pop(event.tier, None)
            return
        self._drop_abandoned(job, event)
        if event.step not in job.copies:
            bisect.insort(job.steps, event.step)
            job.copies[event.step] = {}
        job.copies[event.step].setdefault(event.rank, {})[event.tier] = Copy(
            event.tier, event.path, event.node, event.checksum, event.ts, event.code_version)
        while len(job.steps) > self.keep_steps:
            job.copies.pop(job.steps.pop(0), None)

    @staticmethod
    def _drop_abandoned(job: _Job, event: CheckpointEvent) -> None:
        """A copy of step S newer than copies of later steps means the job went back: drop those."""
        cut = bisect.bisect_right(job.steps, event.step)
        for step in job.steps[cut:]:
            if all(c.ts < event.ts for tiers in job.copies[step].values() for c in tiers.values()):
                job.copies.pop(step)
        job.steps[cut:] = [s for s in job.steps[cut:] if s in job.copies]

    def latest_with_code(self, job: str, *, exclude: str = "") -> RestorePlan | None:
        """The newest complete step written by a code version other than `exclude` (a rollback target)."""
        entry = self._jobs.get(job)
        if entry is None:
            return None
        for step in reversed(entry.steps):
            codes = {c.code_version for tiers in entry.copies[step].values() for c in tiers.values()}
            if len(codes) == 1 and "" not in codes and exclude not in codes:
                plan = self.plan(job, before=step + 1)
                if plan is not None and plan.step == step:
                    return plan
        return None

    def snapshot(self, job: str) -> dict[str, Any]:
        """One job's tiered copies as plain data (the action consumer journals it)."""
        entry = self._jobs.get(job)
        if entry is None:
            return {}
        copies = [[step, rank, asdict(c)] for step in entry.steps
                  for rank, tiers in entry.copies.get(step, {}).items() for c in tiers.values()
                  if c.tier in JOURNALED]
        return {"world_size": entry.world_size, "copies": copies}

    def restore(self, job: str, state: dict[str, Any]) -> None:
        """Inverse of `snapshot`."""
        if not state:
            return
        entry = self._jobs[job] = _Job(world_size=int(state.get("world_size", 0)))
        for step, rank, row in state.get("copies", []):
            if step not in entry.copies:
                bisect.insort(entry.steps, step)
                entry.copies[step] = {}
            entry.copies[step].setdefault(int(rank), {})[row["tier"]] = Copy(**row)

    def plan(self, job: str, *, before: int | None = None, ts: float | None = None,
             lost_nodes: set[str] | frozenset[str] = frozenset()) -> RestorePlan | None:
        """The newest complete step strictly before `before` (saved no later than `ts`), or None."""
        entry = self._jobs.get(job)
        if entry is None or entry.world_size < 1:
            return None
        upper = len(entry.steps) if before is None else bisect.bisect_left(entry.steps, before)
        for step in reversed(entry.steps[:upper]):
            ranks = self._choose(entry, step, ts, lost_nodes)
            if ranks is not None:
                newest = max(c.ts for c in ranks.values())
                return RestorePlan(job, step, newest, ranks)
        return None

    @staticmethod
    def _choose(entry: _Job, step: int, ts: float | None, lost: set[str] | frozenset[str]) -> dict[int, Copy] | None:
        chosen: dict[int, Copy] = {}
        for rank in range(entry.world_size):
            tiers = entry.copies[step].get(rank, {})
            usable = [c for t in PREFERENCE if (c := tiers.get(t)) is not None
                      and (ts is None or c.ts <= ts) and not (c.tier != "durable" and c.node in lost)]
            if not usable:
                return None
            chosen[rank] = usable[0]
        return chosen
