"""ETTR: how much of a job's wall-clock time trained something that stuck.

Effective Training Time Ratio = productive time / wall-clock time. The rest
is split the way ByteRobust reports it, so a team sees where a fault cost
them: *detection* (fault onset until an incident), *localisation* (incident
until the culprit is known: a self-check or replay result, or at once when
the detectors localised it), *failover* (until the first step after the
restart) and *re-computation* (steps done before a restore and redone after
it). Time comes only from the records, so a recording replays to the same
numbers. Overlaps are counted once, in that order of precedence.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trainguard.schemas.actions import DIAGNOSES
from trainguard.schemas.bounded import Bounded
from trainguard.schemas.records import ActionResult, Incident, Record, TrainingStep

CATEGORIES = ("detection", "localisation", "failover", "recompute")


@dataclass(frozen=True)
class EttrReport:
    """One job's account, in seconds."""

    job: str
    wall_s: float
    productive_s: float
    unproductive_s: dict[str, float]
    incidents: int

    @property
    def ettr(self) -> float:
        """Productive over wall-clock time (1.0 for an empty account)."""
        return self.productive_s / self.wall_s if self.wall_s > 0 else 1.0

    def as_dict(self) -> dict[str, object]:
        """Plain values for audit entries and JSON output."""
        return {"job": self.job, "ettr": round(self.ettr, 4), "wall_s": round(self.wall_s, 3),
                "productive_s": round(self.productive_s, 3), "incidents": self.incidents,
                **{f"{k}_s": round(v, 3) for k, v in self.unproductive_s.items()}}


@dataclass
class _Episode:
    onset: float
    detected: float
    localised: float | None = None
    recovered: float | None = None
    max_step: int = -1
    attempt: int = 0


@dataclass
class _Job:
    first: float = float("inf")
    last: float = float("-inf")
    steps: list[tuple[int, float, float]] = field(default_factory=list)  # (step, end ts, duration)
    episodes: list[_Episode] = field(default_factory=list)
    max_step: int = -1
    rank: int | None = None
    attempt: int = 0
    trimmed: int = 0  # steps dropped from the front of `steps` so far


class EttrAccount:
    """Accumulates steps, incidents and action results per job.

    >>> from trainguard.schemas.records import TrainingStep, Incident
    >>> acc = EttrAccount()
    >>> for s in range(1, 5):
    ...     acc.observe(TrainingStep(ts=float(s), job="j", rank=0, node="n", step=s, loss=1.0, step_time_s=1.0))
    >>> acc.observe(Incident(ts=6.0, id="i", kind="nan", job="j", onset=5.0, detected_at=6.0))
    >>> for s in (3, 4):  # restored from step 2, steps 3 and 4 redone
    ...     acc.observe(TrainingStep(ts=6.0 + s, job="j", rank=0, node="n", step=s, loss=1.0, step_time_s=1.0))
    >>> r = acc.report("j")
    >>> r.wall_s, r.unproductive_s["detection"], r.unproductive_s["recompute"]
    (10.0, 1.0, 2.0)
    """

    def __init__(self, *, max_jobs: int = 4096, max_steps: int = 50_000) -> None:
        # Bounded like every per-key map: jobs beyond `max_jobs` are forgotten oldest first, and
        # a job keeps its last `max_steps` steps (older ones are settled: redone or not).
        self._jobs: Bounded[str, _Job] = Bounded(max_jobs)
        self.max_steps = max_steps
        self.dirty: set[str] = set()  # jobs changed since `take_dirty` (to journal them)

    def take_dirty(self) -> list[str]:
        """The jobs changed since the last call (whose account must be made durable)."""
        out = sorted(job for job in self.dirty if job in self._jobs)
        self.dirty.clear()
        return out

    def snapshot(self, job: str, *, steps_from: int = 0) -> dict[str, Any]:
        """One job's account as plain JSON values (infinities as None), with its steps from the
        `steps_from`-th step it ever recorded on (the earlier ones are saved apart, see `steps`)."""
        entry = self._jobs.get(job) or _Job()
        start = max(0, steps_from - entry.trimmed)
        return {"first": _finite(entry.first), "last": _finite(entry.last), "max_step": entry.max_step,
                "rank": entry.rank, "attempt": entry.attempt, "trimmed": entry.trimmed,
                "steps_from": entry.trimmed + start, "steps": [list(s) for s in entry.steps[start:]],
                "episodes": [[e.onset, e.detected, e.localised, e.recovered, e.max_step, e.attempt]
                             for e in entry.episodes]}

    def steps(self, job: str, lo: int, hi: int) -> list[list[float]]:
        """The job's recorded steps number `lo` to `hi` - 1, counting from its first step ever."""
        entry = self._jobs.get(job) or _Job()
        return [list(s) for s in entry.steps[max(0, lo - entry.trimmed):max(0, hi - entry.trimmed)]]

    def steps_seen(self, job: str) -> tuple[int, int]:
        """(steps trimmed, steps recorded) so far: the range `steps` can return is between them."""
        entry = self._jobs.get(job) or _Job()
        return entry.trimmed, entry.trimmed + len(entry.steps)

    def restore(self, job: str, state: dict[str, Any], earlier: list[list[float]] | None = None) -> None:
        """Take back a job's account from `snapshot` (a restarted act); `earlier`: the steps
        from number `state["trimmed"]` up to `state["steps_from"]`, saved apart."""
        first, last = state.get("first"), state.get("last")
        steps = [*(earlier or []), *state.get("steps", [])]
        self._jobs[job] = _Job(first=float("inf") if first is None else float(first),
                               last=float("-inf") if last is None else float(last),
                               steps=[(int(s), float(t), float(d)) for s, t, d in steps],
                               episodes=[_Episode(*e) for e in state.get("episodes", [])],
                               max_step=int(state.get("max_step", -1)), rank=state.get("rank"),
                               attempt=int(state.get("attempt", 0)), trimmed=int(state.get("trimmed", 0)))

    def observe(self, record: Record) -> None:
        """Take in one record; ignores the kinds it does not account for."""
        if isinstance(record, TrainingStep):
            self._step(record)
        elif isinstance(record, Incident):
            self.dirty.add(record.job)
            job = self._job(record.job)
            job.episodes.append(_Episode(record.onset, record.detected_at, max_step=job.max_step,
                                         attempt=job.attempt))
            job.first = min(job.first, record.onset)
            job.last = max(job.last, record.detected_at)
        elif isinstance(record, ActionResult) and record.action in DIAGNOSES and record.job in self._jobs:
            episode = self._open(self._jobs[record.job])
            if episode is not None:
                self.dirty.add(record.job)
                episode.localised = max(episode.localised or record.ts, record.ts)

    def report(self, job: str) -> EttrReport:
        """The account of one job so far."""
        entry = self._jobs.get(job) or _Job()
        wall = max(0.0, entry.last - entry.first) if entry.steps or entry.episodes else 0.0
        labelled = self._labelled(entry)
        spent = _measure_by_priority(labelled, lo=entry.first, hi=entry.last)
        unproductive = {name: spent.get(i, 0.0) for i, name in enumerate(CATEGORIES)}
        productive = max(0.0, wall - sum(unproductive.values()))
        return EttrReport(job, wall, productive, unproductive, len(entry.episodes))

    def timeline(self, job: str) -> list[tuple[str, float, float]]:
        """The unproductive intervals (cause, start, end) behind `report`, for a plot; overlaps not merged."""
        entry = self._jobs.get(job) or _Job()
        return [(CATEGORIES[label], a, b) for a, b, label in self._labelled(entry) if b > a]

    def _labelled(self, entry: _Job) -> list[tuple[float, float, int]]:
        labelled: list[tuple[float, float, int]] = []
        for ep in entry.episodes:
            localised = ep.localised if ep.localised is not None else ep.detected
            recovered = ep.recovered if ep.recovered is not None else entry.last
            labelled += [(ep.onset, ep.detected, 0), (ep.detected, localised, 1), (localised, recovered, 2)]
        labelled += [(ts - dur, ts, 3) for ts, dur in self._redone(entry)]
        return labelled

    def attempt(self, job: str) -> int:
        """The highest restart generation (`TrainingStep.attempt`) the job has reported."""
        entry = self._jobs.get(job)
        return entry.attempt if entry is not None else 0

    def _step(self, rec: TrainingStep) -> None:
        job = self._job(rec.job)
        self.dirty.add(rec.job)
        job.attempt = max(job.attempt, rec.attempt)
        if job.rank is None:
            job.rank = rec.rank
        if rec.rank != job.rank:  # one rank speaks for the job: ranks step in lockstep
            return
        job.first = min(job.first, rec.ts - rec.step_time_s)
        job.last = max(job.last, rec.ts)
        for ep in job.episodes:
            # Recovered at the first step after the detection that comes from a restart (a new
            # attempt) or from a restore (the step counter went back); every open episode closes.
            if ep.recovered is None and rec.ts > ep.detected and (rec.attempt > ep.attempt
                                                                    or rec.step <= ep.max_step):
                ep.recovered = rec.ts - rec.step_time_s
        job.steps.append((rec.step, rec.ts, rec.step_time_s))
        if len(job.steps) > self.max_steps + self.max_steps // 4:  # trim in chunks: amortised O(1)
            job.trimmed += len(job.steps) - self.max_steps
            del job.steps[: len(job.steps) - self.max_steps]
        job.max_step = max(job.max_step, rec.step)

    def _job(self, name: str) -> _Job:
        job = self._jobs.get(name)
        if job is None:
            job = self._jobs[name] = _Job()
        return job

    @staticmethod
    def _open(job: _Job) -> _Episode | None:
        return next((ep for ep in reversed(job.episodes) if ep.recovered is None), None)

    @staticmethod
    def _redone(job: _Job) -> list[tuple[float, float]]:
        """Steps later done again: (end ts, duration) of the earlier runs."""
        last_run: dict[int, float] = {}
        for step, ts, _ in job.steps:
            last_run[step] = max(ts, last_run.get(step, ts))
        return [(ts, dur) for step, ts, dur in job.steps if ts < last_run[step]]


def _finite(x: float) -> float | None:
    return x if x not in (float("inf"), float("-inf")) else None


def _measure_by_priority(intervals: list[tuple[float, float, int]], *, lo: float, hi: float) -> dict[int, float]:
    """Length covered by each label within [lo, hi], where overlaps go to the lowest label.

    A sweep over the sorted interval edges, O(n log n): a job with thousands
    of incidents is reported on every decision and by the console, and the
    former test of every interval at every edge took seconds there.
    """
    edges: list[tuple[float, int, int]] = []
    for a, b, label in intervals:
        a, b = max(lo, min(hi, a)), max(lo, min(hi, b))
        if b > a:
            edges += [(a, 1, label), (b, -1, label)]
    edges.sort(key=lambda e: e[0])
    active: dict[int, int] = {}
    out: dict[int, float] = {}
    prev = lo
    for x, delta, label in edges:
        if x > prev:
            live = [lab for lab, n in active.items() if n > 0]
            if live:
                out[min(live)] = out.get(min(live), 0.0) + (x - prev)
            prev = x
        active[label] = active.get(label, 0) + delta
    return out
