"""Who is slow: peers compared at the same step, and GPU throttling signals.

In synchronous training every rank waits for the slowest one, so the step
time is the same everywhere and only the *compute* time (time outside
collectives) tells the straggler from its victims. Each pipeline stage's
own level is divided out first (stages do different work; the last one
computes the loss), so a heavier stage is never a straggler by design. `StragglerTracker`
gathers each step's compute times across ranks and flags ranks whose value
sits `z` robust standard deviations (median/MAD) above their peers' median
and at least `min_rel` above it. A rank flagged in `min_hits` of the last
`window` steps is a suspect. If more than a quarter of the ranks are
suspects on more than one node, the cause is systemic (data, network) and
nobody is named. In a small job (2 to 8 nodes) one slow node holds too
large a share of the ranks to stand out among them, so whole nodes are
compared too: a node whose every rank is slower than every other rank, and
whose mean is `min_rel` above the next node's, is the straggler.

`GpuSlowSignals` remembers, per node, the latest sign of a GPU running
slow: thermal, power-brake or hardware-slowdown throttle reasons (NVML
clock-event bits 0x08, 0x20, 0x40, 0x80; software power capping, 0x04, is
normal under load and ignored), an SM clock far below its maximum while
busy, or a busy clock well below the job's other nodes (peer comparison).
If more than a quarter of a job's (4 or more) nodes look slow, nobody is named.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any

import numpy as np

from trainguard.detectors.common import Bounded, Snapshottable, median, median_of_sorted, rank_map, store_known
from trainguard.schemas.records import NodeGpuSample, TrainingStep

SLOW_THROTTLE_BITS = 0x08 | 0x20 | 0x40 | 0x80
# Ranks in a step up to which plain sorts beat numpy's per-call cost (measured crossover about 256).
SMALL_STEP = 128


class _Peers(Snapshottable):
    __slots__ = ("step", "attempt", "stages", "node_of", "flags", "finalized")

    def __init__(self, step: int, attempt: int) -> None:
        self.step = step
        self.attempt = attempt
        self.stages: dict[int, tuple[list[float], list[int]]] = {}  # pp stage -> (values, ranks) this step
        self.node_of: Bounded[int, str] = rank_map()
        self.flags: Bounded[int, deque[int]] = rank_map()
        self.finalized = -1


def _lower_quartile(values: np.ndarray) -> float:
    k = len(values) // 4
    return float(np.partition(values, k)[k])


def _limit(med: float, scale: float, z: float, min_rel: float) -> float:
    """The ratio above which a rank is slow: `min_rel` over the median and `z` robust deviations (MAD) above it."""
    return max(med * (1 + min_rel), med + z * max(scale, 0.005 * med))


def _outliers_np(stages: list[tuple[list[float], list[int]]], z: float,
                 min_rel: float) -> tuple[list[float], list[int]]:
    """(every rank's ratio to its stage's level, the positions of the slow ones), in numpy: a large step's way."""
    arrays = [np.asarray(values) for values, _ in stages]
    fallback = _lower_quartile(np.concatenate(arrays))
    ratios = np.concatenate([v / (_lower_quartile(v) if len(v) >= 4 else fallback) for v in arrays])
    med = float(np.median(ratios))
    scale = 1.4826 * float(np.median(np.abs(ratios - med)))
    return ratios.tolist(), np.flatnonzero(ratios > _limit(med, scale, z, min_rel)).tolist()


def _levels(stages: list[tuple[list[float], list[int]]]) -> list[float]:
    """Each stage's level, as `_outliers_np` takes it: its lower quartile, or the whole step's for a stage
    under four ranks."""
    every = sorted([v for values, _ in stages for v in values])
    fallback = every[len(every) // 4]
    return [sorted(values)[len(values) // 4] if len(values) >= 4 else fallback for values, _ in stages]


def _outliers_py(stages: list[tuple[list[float], list[int]]], z: float,
                 min_rel: float) -> tuple[list[float], list[int]] | None:
    """The same as `_outliers_np`, bit for bit, with plain sorts: a few dozen ranks cost numpy ~90 us of calls
    and Python ~15 (benchmarks/bench_detectors.py, the backtest). None when a ratio is not finite (an
    infinite step time): numpy's NaN rules decide that step, as they always did."""
    ratios: list[float] = []
    for (values, _), level in zip(stages, _levels(stages)):
        ratios += [v / level for v in values]
    if not math.isfinite(sum(ratios)):
        return None
    med = median_of_sorted(sorted(ratios))
    scale = 1.4826 * median_of_sorted(sorted([abs(r - med) for r in ratios]))
    limit = _limit(med, scale, z, min_rel)
    return ratios, [i for i, r in enumerate(ratios) if r > limit]


def _tight(stages: list[tuple[list[float], list[int]]], min_rel: float) -> bool:
    """Whether every rank's ratio to its stage's level lies within `min_rel` of every other's: then neither
    `_outliers_py` nor `StragglerTracker._slow_node` can flag anyone, and the step needs no scoring.

    Both flag only a value at least `min_rel` above another (an outlier exceeds the median by that much, a
    slow node's mean exceeds the next node's by that much), and each ratio lies between the smallest and the
    largest. The bound is kept a billionth short so that float rounding in the means cannot reach it. Only
    maxima, minima and the stages' `_levels`, all in C: most healthy steps of up to 128
    ranks end here. Any non-finite value (an infinite step time) is not tight: the full path decides.

    >>> _tight([([1.00, 1.02, 1.01, 1.03], [0, 1, 2, 3])], 0.05), _tight([([1.0, 1.0, 1.0, 1.2], [0, 1, 2, 3])], 0.05)
    (True, False)
    """
    if not all(math.isfinite(max(values)) for values, _ in stages):  # values are > 0: NaN never gets in
        return False
    highest, lowest = 0.0, math.inf
    for (values, _), level in zip(stages, _levels(stages)):
        highest, lowest = max(highest, max(values) / level), min(lowest, min(values) / level)
    return highest < lowest * (1 + min_rel) * (1 - 1e-9)


class StragglerTracker:
    """Robust z-scores of compute time across ranks at each step.

    >>> from trainguard.schemas.records import TrainingStep
    >>> t = StragglerTracker(min_hits=3)
    >>> for s in range(6):
    ...     for r in range(8):
    ...         c = 1.5 if r == 5 else 1.0 + 0.01 * r
    ...         t.add(TrainingStep(ts=s, job="j", rank=r, node=f"n{r // 4}", step=s, loss=1.0, compute_time_s=c))
    >>> t.suspects("j")
    ([5], ['n1'], 'peers')
    """

    def __init__(self, *, z: float = 4.0, min_rel: float = 0.05, window: int = 12, min_hits: int = 2,
                 max_jobs: int = 10_000) -> None:
        self.z = z
        self.min_rel = min_rel
        self.window = window
        self.min_hits = min_hits
        self._jobs: Bounded[str, _Peers] = Bounded(max_jobs)

    def add(self, rec: TrainingStep) -> None:
        """Add one rank's step; a newer step closes (scores) the previous one."""
        p = self._jobs.get(rec.job)
        if p is None or rec.attempt > p.attempt:
            self._jobs[rec.job] = p = _Peers(rec.step, rec.attempt)
        if rec.attempt != p.attempt:
            return
        value = rec.compute_time_s if rec.compute_time_s is not None else rec.step_time_s
        if rec.rank not in p.node_of:
            p.node_of[rec.rank] = rec.node
        if rec.step > p.step:
            self._score(p)
            p.step, p.stages = rec.step, {}
        elif rec.step < p.step:
            return
        if value > 0:
            stage = p.stages.get(rec.pp)
            if stage is None:
                p.stages[rec.pp] = stage = ([], [])
            stage[0].append(value)
            stage[1].append(rec.rank)

    def _score(self, p: _Peers) -> None:
        """Remove each pipeline stage's own level, then compare every rank with all the others.

        A stage's level is its lower quartile, which stays on the healthy ranks
        even when a slow node holds up to half of the stage.
        """
        p.finalized = p.step
        stages = list(p.stages.values())
        size = sum(len(values) for values, _ in stages)
        if size < 4:
            return
        if size <= SMALL_STEP and _tight(stages, self.min_rel):
            return  # the common healthy step: no rank and no node can stand `min_rel` above another
        found = _outliers_py(stages, self.z, self.min_rel) if size <= SMALL_STEP else None
        ratios, slow_at = found if found is not None else _outliers_np(stages, self.z, self.min_rel)
        ranks = [r for _, stage_ranks in stages for r in stage_ranks]
        slow = [ranks[i] for i in slow_at] or self._slow_node(p, ranks, ratios)
        for rank in slow:
            hits = p.flags.get(rank)
            if hits is None:
                p.flags[rank] = hits = deque(maxlen=self.min_hits * 2)
            hits.append(p.step)

    def _slow_node(self, p: _Peers, ranks: list[int], ratios: list[float]) -> list[int]:
        """In a small job one slow node is a large share of the ranks, too many to be outliers among them:
        compare whole nodes instead. A node whose every rank is slower than every rank elsewhere, and
        whose mean is `min_rel` above the next node's, is the straggler."""
        by_node: dict[str, list[float]] = {}
        node_of = p.node_of
        for rank, ratio in zip(ranks, ratios):
            node = node_of.get(rank, "")
            values = by_node.get(node)
            if values is None:
                if len(by_node) == 8:
                    return []  # a large job: its ninth node ends the comparison (no pass over every rank)
                by_node[node] = values = []
            values.append(ratio)
        if len(by_node) < 2:
            return []
        means = sorted(((sum(v) / len(v), n) for n, v in by_node.items()), reverse=True)
        (top, node), (second, _) = means[0], means[1]
        rest = max(r for n, v in by_node.items() if n != node for r in v)
        if top < second * (1 + self.min_rel) or min(by_node[node]) <= rest:
            return []
        return [r for r in ranks if p.node_of.get(r) == node]

    def suspects(self, job: str) -> tuple[list[int], list[str], str]:
        """(ranks, nodes, how) of the ranks slow in enough recent steps."""
        p = self._jobs.get(job)
        if p is None:
            return [], [], "none"
        since = p.finalized - self.window
        ranks = sorted(r for r, hits in p.flags.items() if sum(1 for s in hits if s > since) >= self.min_hits)
        nodes = sorted({p.node_of[r] for r in ranks})
        all_nodes = len(set(p.node_of.values()))
        if not ranks or (len(ranks) * 4 > max(len(p.node_of), 1) and (len(nodes) > 1 or all_nodes < 2)):
            return [], [], "none"  # many ranks on many nodes: systemic (data, network), nobody to name
        return ranks, nodes, "peers"

    def ranks_on(self, job: str, nodes: list[str]) -> list[int]:
        """The job's ranks running on `nodes` (a node-level culprit slows all of them)."""
        p = self._jobs.get(job)
        wanted = set(nodes)
        return sorted(r for r, n in p.node_of.items() if n in wanted) if p is not None else []

    def nodes(self, job: str) -> list[str]:
        """Every node the job's ranks were seen on."""
        p = self._jobs.get(job)
        return sorted(set(p.node_of.values())) if p else []

    def size(self) -> int:
        return sum(sum(len(v) for v, _ in p.stages.values()) + len(p.node_of) + len(p.flags) + 1
                   for p in self._jobs.values())


class GpuSlowSignals:
    """Per node, the latest GPU evidence of running slow (throttling, low clocks)."""

    def __init__(self, *, clock_ratio: float = 0.8, busy_pct: float = 50.0, keep_s: float = 300.0,
                 peer_ratio: float = 0.92, max_nodes: int = 100_000) -> None:
        self.clock_ratio = clock_ratio
        self.busy_pct = busy_pct
        self.keep_s = keep_s
        self.peer_ratio = peer_ratio
        self._slow: Bounded[str, tuple[float, dict[str, Any]]] = Bounded(max_nodes)
        self._clock: Bounded[str, tuple[float, float]] = Bounded(max_nodes)  # node -> (ts, lowest busy clock ratio)

    def add(self, sample: NodeGpuSample) -> None:
        """Remember (or forget) one node's slow-GPU evidence; unobserved changes nothing.

        One pass over the GPUs (every node's sample comes through here once a second).
        """
        if not sample.nvml_ok:
            return
        node, busy_pct, clock_ratio = sample.node, self.busy_pct, self.clock_ratio
        lowest: float | None = None  # the lowest clock ratio of a busy GPU
        found: dict[str, Any] = {}
        for g in sample.gpus:
            top = g.max_sm_clock_mhz
            busy = top > 0 and g.util_pct >= busy_pct
            if busy:
                ratio = g.sm_clock_mhz / top
                if lowest is None or ratio < lowest:
                    lowest = ratio
            if g.throttle_reasons & SLOW_THROTTLE_BITS:
                found[f"{node}:{g.index}"] = {"throttle_reasons": g.throttle_reasons, "temp_c": g.temp_c}
            elif busy and g.sm_clock_mhz < clock_ratio * top:
                found[f"{node}:{g.index}"] = {"sm_clock_mhz": g.sm_clock_mhz, "max": top}
        if lowest is not None:
            clock = self._clock
            if node in clock:  # a known node, every second: stored in C (`store_known`), it keeps its place
                store_known(clock, node, (sample.ts, lowest))
            else:
                clock[node] = (sample.ts, lowest)
        if found:
            self._slow[node] = (sample.ts, found)
        elif node in self._slow:
            del self._slow[node]

    def slow_nodes(self, nodes: list[str], ts: float) -> list[str]:
        """Those of `nodes` with recent slow-GPU evidence, or clocks well below their peers'.

        Peers matter: a power-capped GPU may sit at 82 % of its maximum clock,
        which looks fine alone but is far below the 99 % its peers run at.
        """
        slow = {n for n in nodes if n in self._slow and ts - self._slow[n][0] <= self.keep_s}
        clocks = {n: self._clock[n][1] for n in nodes if n in self._clock and ts - self._clock[n][0] <= self.keep_s}
        if len(clocks) >= 2:  # of two nodes, the faster one is the reference
            typical = median(clocks.values()) if len(clocks) >= 3 else max(clocks.values())
            slow |= {n for n, r in clocks.items() if r < self.peer_ratio * typical}
        systemic = len(nodes) >= 4 and len(slow) * 4 > len(nodes)
        return [] if systemic else sorted(slow)

    def evidence(self, nodes: list[str], ts: float) -> dict[str, Any]:
        """The slow-GPU findings of `nodes`, keyed by "node:index"."""
        out: dict[str, Any] = {}
        for n in nodes:
            if n in self._slow and ts - self._slow[n][0] <= self.keep_s:
                out.update(self._slow[n][1])
            if n in self._clock:
                out[f"{n}:min_clock_ratio"] = round(self._clock[n][1], 3)
        return out

    def size(self) -> int:
        return len(self._slow) + len(self._clock)
