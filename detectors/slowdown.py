"""slowdown: the job got slower; find the rank or node that drags it.

Two questions, answered separately:

1. *Is the job slower?* Online change-point detection on the job's time per
   step (per token when tokens are reported), taken from its lowest rank
   (in synchronous training every rank waits for the slowest, so one rank
   speaks for the job). The recent median (window sized to ~`recent_s` of
   event time, 3..15 steps) is compared with a robust baseline (median of
   up to `baseline_n` older steps). It fires when the recent median exceeds
   the baseline by `min_rel` *and* by `k` robust standard errors, for
   `confirm` consecutive steps. Until a straggler is named (or for at most
   `localise_wait_s`) the episode must persist, or it is dropped as a
   fluctuation. The baseline never learns from an open
   episode (river's protect-the-model idea); if the new speed persists for
   `accept_s` it becomes the new normal. A median is used rather than river's
   PageHinkley, which is scale-dependent and trips on checkpoint steps.
2. *Who is slow?* Peers at the same step (`detectors.peers.StragglerTracker`)
   and GPU signals (thermal/power throttling, clocks below max).

Persistence before eviction (`detectors.persistence`): a GPU that throttles
for 40 s or a link that slows a job for a minute recovers on its own, and
evicting its node restarts the whole job. So an episode is reported only
once it has lasted `persist_s` (default 120 s: found within three minutes of
its onset), or at once when one of its nodes already had `recur_n - 1`
transient episodes within `recur_window_s`. An episode that ends sooner is
a *transient* anomaly per suspect node (score 0, never an incident, counted
for that node); the report's evidence carries the duration and each node's
history.

A slow whole-job slide that the trailing baseline follows is caught by
`detectors.trend.DeclineTracker` (blocks of `decline_block_s` against the
job's fastest recent block); it is reported job-wide, naming no node.
"""

from __future__ import annotations

from collections import deque
from itertools import islice

from trainguard.detectors.base import Detector
from trainguard.detectors.common import Bounded, Rolling, Snapshottable, finding, median
from trainguard.detectors.dispatch import on
from trainguard.detectors.peers import GpuSlowSignals, StragglerTracker
from trainguard.detectors.persistence import PERSISTENT, RECURRING, Persistence
from trainguard.detectors.trend import DeclineTracker
from trainguard.schemas.records import Anomaly, NodeGpuSample, TrainingStep

GUARD = 5  # the newest steps stay out of the baseline, so a fresh slowdown does not teach it


class _Series(Snapshottable):
    __slots__ = ("leader", "attempt", "last_step", "last_ts", "recent", "base", "hits", "episode", "rising",
                 "reported", "suspects")

    def __init__(self, leader: int, attempt: int, baseline_n: int) -> None:
        self.leader = leader
        self.attempt = attempt
        self.last_step = -1
        self.last_ts = 0.0
        self.recent: deque[tuple[float, float]] = deque(maxlen=15)  # (ts, value)
        self.base = Rolling(baseline_n)
        self.hits = 0
        self.episode: float | None = None  # event time the open episode began
        self.rising: float | None = None  # event time the current run of hits began
        self.reported = True  # whether the open episode was reported yet
        self.suspects: list[str] = []  # nodes the open, unreported episode was localised to so far


class SlowdownDetector(Detector):
    """Fires on a sustained drop in job throughput, localised to stragglers.

    >>> from trainguard.schemas.records import TrainingStep
    >>> d = SlowdownDetector(min_baseline=10)
    >>> out = []
    >>> for s in range(200):
    ...     t = 1.0 if s < 50 else 1.3
    ...     rec = TrainingStep(ts=float(s), job="j", rank=0, node="n0", step=s, loss=1.0, step_time_s=t)
    ...     out += d.observe(rec)
    >>> [(a.kind, a.step >= 50) for a in out]
    [('slowdown', True)]
    """

    state_is_a_tree = True  # checked by detectors.checks (check_state_is_a_tree)

    def __init__(
        self,
        *,
        instance: str = "slowdown",
        min_rel: float = 0.07,
        k: float = 4.0,
        recent_s: float = 40.0,
        confirm: int = 2,
        baseline_n: int = 120,
        min_baseline: int = 20,
        accept_s: float = 3600.0,
        localise_wait_s: float = 45.0,
        straggler_z: float = 4.0,
        decline_rel: float = 0.08,
        decline_block_s: float = 300.0,
        decline_confirm: int = 2,
        persist_s: float = 120.0,
        recur_n: int = 3,
        recur_window_s: float = 3600.0,
        max_jobs: int = 10_000,
    ) -> None:
        super().__init__(instance=instance)
        self.persist_s, self.recur_n, self.recur_window_s = persist_s, recur_n, recur_window_s
        self._persist = Persistence(persist_s=persist_s, recur_n=recur_n, recur_window_s=recur_window_s,
                                    max_keys=max_jobs)
        self.min_rel = min_rel
        self.k = k
        self.recent_s = recent_s
        self.confirm = confirm
        self.baseline_n = baseline_n
        self.min_baseline = min_baseline
        self.accept_s = accept_s
        self.localise_wait_s = localise_wait_s
        self.straggler_z = straggler_z
        self._series: Bounded[str, _Series] = Bounded(max_jobs)
        self._peers = StragglerTracker(z=straggler_z, max_jobs=max_jobs)
        self._gpu = GpuSlowSignals()
        self.decline_rel = decline_rel
        self.decline_block_s = decline_block_s
        self.decline_confirm = decline_confirm
        self._trend = DeclineTracker(block_s=decline_block_s, rel=decline_rel, confirm=decline_confirm,
                                     accept_s=accept_s, max_jobs=max_jobs)

    @on(TrainingStep)
    def _any_step(self, record: TrainingStep) -> list[Anomaly] | None:
        self._peers.add(record)
        s = self._series.get(record.job)
        if s is not None and record.rank > s.leader and record.attempt == s.attempt:
            return None  # the hot path: only the lowest rank speaks for the job's speed
        return self._step(record)

    @on(NodeGpuSample)
    def _gpu_sample(self, record: NodeGpuSample) -> None:
        self._gpu.add(record)

    def _step(self, rec: TrainingStep) -> list[Anomaly]:
        s = self._series.get(rec.job)
        if s is None or rec.attempt > s.attempt or (rec.rank < s.leader and rec.attempt == s.attempt):
            self._series[rec.job] = s = _Series(rec.rank, rec.attempt, self.baseline_n)
        if rec.rank != s.leader or rec.attempt != s.attempt or rec.step <= s.last_step:
            return []
        value = rec.step_time_s if rec.step_time_s > 0 else (
            rec.ts - s.last_ts if rec.step == s.last_step + 1 else 0.0)
        if rec.tokens > 0 and value > 0:
            value = value / rec.tokens
        s.last_step, s.last_ts = rec.step, rec.ts
        if value <= 0:
            return []
        out = self._update(s, rec, value)
        if s.episode is not None or s.hits:  # a step change: the change-point test has it
            self._trend.hold(rec.job, rec.ts)
            return out
        decline = self._trend.add(rec.job, rec.attempt, rec.ts, value)
        if decline is not None:
            onset, rel, ref = decline
            out.append(finding(self.instance, "slowdown", ts=rec.ts, onset=onset, job=rec.job, step=rec.step,
                               key=("decline", onset), evidence={"slowdown": round(rel, 4), "baseline": ref,
                                                                  "localised_by": "none", "cause": "gradual_decline"}))
        return out

    def _update(self, s: _Series, rec: TrainingStep, value: float) -> list[Anomaly]:
        s.recent.append((rec.ts, value))
        if len(s.recent) > GUARD and s.episode is None:
            s.base.add(s.recent[-GUARD - 1][1])  # each value enters the baseline once, GUARD steps late
        if len(s.base) < self.min_baseline:
            return []
        base = s.base.median()
        n = self._window(s)
        recent = median(v for _, v in islice(reversed(s.recent), n))
        spread = 1.4826 * s.base.mad() / (n ** 0.5)
        slow = recent > base * (1 + self.min_rel) and recent - base > self.k * spread
        if s.episode is not None:
            return self._in_episode(s, rec, recent, base)
        if not slow:
            s.hits, s.rising = 0, None
            return []
        s.hits += 1
        if s.rising is None:
            s.rising = s.recent[-n][0] if n <= len(s.recent) else rec.ts
        if s.hits < self.confirm:
            return []
        s.episode, s.reported = rec.ts, False
        return self._maybe_report(s, rec, recent, base)

    def _maybe_report(self, s: _Series, rec: TrainingStep, recent: float, base: float) -> list[Anomaly]:
        """Report once the stragglers are known, or `localise_wait_s` after detection at the latest."""
        assert s.episode is not None and s.rising is not None
        if recent < base * (1 + self.min_rel / 2):  # it did not last: a fluctuation, or a transient fail-slow
            out = self._transient(s, rec)
            s.episode, s.hits, s.rising, s.reported, s.suspects = None, 0, None, True, []
            return out
        ranks, nodes, how = self._peers.suspects(rec.job)
        if not nodes and rec.ts - s.episode < self.localise_wait_s:
            if not self._gpu.slow_nodes(self._peers.nodes(rec.job), rec.ts):
                return []  # wait a little for the peers to name the straggler
        if nodes:
            s.suspects = list(nodes)
        lasted = rec.ts - s.rising
        recurring = any(self._persist.recurrences(n, rec.ts) >= self.recur_n - 1 for n in nodes)
        if lasted < self.persist_s and not recurring:
            return []  # persistence before eviction: a fail-slow under `persist_s` may yet recover
        s.reported = True
        verdict = PERSISTENT if lasted >= self.persist_s else RECURRING
        return [self._report(rec, s.rising, recent, base, (ranks, nodes, how), verdict)]

    def _transient(self, s: _Series, rec: TrainingStep) -> list[Anomaly]:
        """An episode that ended before it persisted: counted against the nodes it was pinned on, never evicted."""
        if s.rising is None or not s.suspects:
            return []
        out = []
        for node in s.suspects:
            summary = self._persist.transient(node, s.rising, rec.ts - s.rising, rec.ts)
            out.append(finding(self.instance, "slowdown", ts=rec.ts, onset=s.rising, job=rec.job, nodes=[node],
                               step=rec.step, score=0.0, key=("transient", node, s.rising),
                               evidence={**summary, "cause": "fail_slow"}))
        return out

    def _window(self, s: _Series) -> int:
        """How many recent steps to take the median of: ~recent_s of time, 3..15."""
        step_s = s.recent[-1][0] - s.recent[0][0]
        per_step = step_s / (len(s.recent) - 1) if len(s.recent) > 1 and step_s > 0 else self.recent_s
        return max(3, min(len(s.recent), int(self.recent_s / per_step) if per_step > 0 else 3))

    def _in_episode(self, s: _Series, rec: TrainingStep, recent: float, base: float) -> list[Anomaly]:
        assert s.episode is not None
        if not s.reported:
            return self._maybe_report(s, rec, recent, base)
        if recent < base * (1 + self.min_rel / 2):
            s.episode, s.hits, s.rising = None, 0, None
        elif rec.ts - s.episode > self.accept_s:  # the new speed is the new normal
            self._trend.rebase(rec.job)
            s.base = Rolling(self.baseline_n)
            for _, v in s.recent:
                s.base.add(v)
            s.episode, s.hits, s.rising = None, 0, None
        return []

    def _report(self, rec: TrainingStep, onset: float, recent: float, base: float,
                found: tuple[list[int], list[str], str], verdict: str = PERSISTENT) -> Anomaly:
        ranks, nodes, how = found
        if not nodes:
            nodes = self._gpu.slow_nodes(self._peers.nodes(rec.job), rec.ts)
            how = "gpu_signals" if nodes else "none"
            ranks = self._peers.ranks_on(rec.job, nodes)  # a throttled GPU node slows every rank on it
        evidence = {"slowdown": round(recent / base - 1, 4), "baseline": base, "recent": recent,
                    "localised_by": how, "gpu": self._gpu.evidence(nodes, rec.ts), "persistence": verdict,
                    "duration_s": round(rec.ts - onset, 3),
                    "node_transients": {n: self._persist.recurrences(n, rec.ts) for n in nodes},
                    "history": {n: self._persist.history(n) for n in nodes}}
        return finding(self.instance, "slowdown", ts=rec.ts, onset=onset, job=rec.job, nodes=nodes, ranks=ranks,
                       step=rec.step, key=rec.attempt, evidence=evidence)

    def state_size(self) -> int:
        return sum(len(s.recent) + len(s.base) + 1 for s in self._series.values()) + self._peers.size() + \
            self._gpu.size() + self._trend.size() + self._persist.size()
