"""A gradual decline of a whole job's throughput, which a trailing baseline never sees.

The step-time change-point test in `detectors.slowdown` compares recent
steps with a rolling baseline of the last few minutes, so a slow slide (10 %
over an hour, as thermal or fabric degradation looks) moves the baseline
along with it and is never flagged. This tracker keeps a *fixed* reference
instead: the job's time per step is cut into blocks of `block_s` of event
time, each block is summarised by its median (robust to checkpoint steps
and data-loader stalls), and the reference is the fastest block median of
the last `ref_s` (the job's demonstrated speed). A decline is reported when
`confirm` consecutive blocks sit `rel` or more above that reference.

Normal drift (diurnal temperature, a few per cent) stays below `rel`; a
restart's first block (compilation, warm caches) is skipped; once reported,
the episode stays open until the job is back within rel/2 of its reference
or `accept_s` passes, after which the new speed is the new normal.
"""

from __future__ import annotations

from collections import deque

from trainguard.detectors.common import Bounded, Snapshottable, median


class _Trend(Snapshottable):
    __slots__ = ("attempt", "block_start", "values", "blocks", "skip", "above", "open_since", "reported_ts")

    def __init__(self, attempt: int, ts: float, ref_blocks: int) -> None:
        self.attempt = attempt
        self.block_start = ts
        self.values: list[float] = []
        self.blocks: deque[tuple[float, float]] = deque(maxlen=ref_blocks)  # (end ts, block median)
        self.skip = True  # the first block of an attempt warms up
        self.above = 0
        self.open_since: float | None = None  # when the first block above the reference began
        self.reported_ts: float | None = None


class DeclineTracker:
    """Per job: is the time per step `rel` above the fastest recent block, block after block?

    >>> t = DeclineTracker(block_s=10.0, rel=0.1, confirm=2, ref_s=1000.0)
    >>> hits = [t.add("j", 0, float(s), 1.0 + (0.2 if s >= 60 else 0.0)) for s in range(100)]
    >>> [round(h[1], 2) for h in hits if h is not None]
    [0.2]
    """

    def __init__(self, *, block_s: float = 300.0, rel: float = 0.08, confirm: int = 2, ref_s: float = 21_600.0,
                 accept_s: float = 3600.0, max_jobs: int = 10_000) -> None:
        self.block_s = block_s
        self.rel = rel
        self.confirm = confirm
        self.accept_s = accept_s
        self._ref_blocks = max(confirm + 1, int(ref_s / block_s))
        self._jobs: Bounded[str, _Trend] = Bounded(max_jobs)

    def add(self, job: str, attempt: int, ts: float, value: float) -> tuple[float, float, float] | None:
        """Feed one step's time per step (or per token); (onset, decline, reference) when a decline is confirmed."""
        t = self._jobs.get(job)
        if t is None or attempt > t.attempt:
            old = t
            self._jobs[job] = t = _Trend(attempt, ts, self._ref_blocks)
            if old is not None:  # the job's demonstrated speed survives a restart
                t.blocks.extend(old.blocks)
                t.reported_ts, t.open_since, t.above = old.reported_ts, old.open_since, old.above
        elif attempt < t.attempt:
            return None
        if ts - t.block_start < self.block_s:
            t.values.append(value)
            return None
        level = median(t.values) if len(t.values) >= 3 else None
        t.block_start, t.values = ts, [value]
        if level is None or t.skip:
            t.skip = False
            return None
        return self._close(t, ts, level)

    def _close(self, t: _Trend, ts: float, level: float) -> tuple[float, float, float] | None:
        older = [b for _, b in list(t.blocks)[: max(0, len(t.blocks) - t.above)]]
        t.blocks.append((ts, level))
        if len(older) < self.confirm:
            return None
        ref = min(older)
        decline = level / ref - 1.0 if ref > 0 else 0.0
        if t.reported_ts is not None:
            if decline < self.rel / 2 or ts - t.reported_ts > self.accept_s:
                t.reported_ts, t.open_since, t.above = None, None, 0  # recovered, or the new normal
                if decline >= self.rel / 2:
                    t.blocks.clear()
                    t.blocks.append((ts, level))
            return None
        if decline < self.rel:
            t.above, t.open_since = 0, None
            return None
        if t.open_since is None:
            t.open_since = ts - self.block_s
        t.above += 1
        if t.above < self.confirm:
            return None
        t.reported_ts = ts
        return t.open_since, decline, ref

    def hold(self, job: str, ts: float) -> None:
        """A step change is being handled elsewhere (a straggler episode): its steps are no decline.

        The block under way is dropped and the run of blocks above the
        reference starts over, so a straggler that came and went is never
        reported again, late, as a decline.
        """
        t = self._jobs.get(job)
        if t is not None:
            t.values, t.block_start, t.above, t.open_since, t.skip = [], ts, 0, None, True

    def rebase(self, job: str) -> None:
        """The job's current speed was accepted as its new normal: forget the older, faster blocks."""
        t = self._jobs.get(job)
        if t is not None:
            t.blocks.clear()

    def forget(self, job: str) -> None:
        """Drop a job's history (it ended)."""
        self._jobs.pop(job, None)

    def size(self) -> int:
        return sum(len(t.blocks) + len(t.values) for t in self._jobs.values())
