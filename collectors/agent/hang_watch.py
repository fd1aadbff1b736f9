"""Local hang suspicion: sample stacks periodically while a training process makes no progress.

The hook's heartbeat thread writes `<progress_dir>/<pid>.json` with the
current step and phase on every beat (it keeps beating while the main
thread is stuck). `HangWatch` is the pure rule over those readings: a
process in the `training` phase whose step has not moved for
`suspect_after_s` is suspected hung, and while it stays so, a stack sample
is due every `sample_every_s`. The stacks of a hang are the evidence the
hang detector and a human need most, and they are gone once it is
restarted, so the agent takes them itself without waiting for a command.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


@dataclass
class _Progress:
    step: int
    since: float
    last_sample: float | None = None


class HangWatch:
    """Decides when a process's stacks are due; time is passed in (monotonic seconds)."""

    def __init__(self, *, suspect_after_s: float, sample_every_s: float) -> None:
        self.suspect_after_s = suspect_after_s
        self.sample_every_s = sample_every_s
        self._seen: dict[int, _Progress] = {}

    def due(self, pid: int, *, step: int, phase: str, now: float) -> float | None:
        """Seconds without progress if a stack sample of `pid` is due now, else None.

        >>> w = HangWatch(suspect_after_s=60, sample_every_s=30)
        >>> w.due(7, step=5, phase="training", now=0.0), w.due(7, step=5, phase="training", now=61.0)
        (None, 61.0)
        >>> w.due(7, step=5, phase="training", now=70.0), w.due(7, step=5, phase="training", now=92.0)
        (None, 92.0)
        """
        seen = self._seen.get(pid)
        if seen is None or seen.step != step or phase != "training":
            self._seen[pid] = _Progress(step=step, since=now)
            return None
        stalled = now - seen.since
        if stalled < self.suspect_after_s:
            return None
        if seen.last_sample is not None and now - seen.last_sample < self.sample_every_s:
            return None
        seen.last_sample = now
        return stalled

    def forget_except(self, pids: set[int]) -> None:
        """Drop state of processes that are gone."""
        for pid in set(self._seen) - pids:
            del self._seen[pid]


def read_progress(progress_dir: Path) -> dict[int, tuple[int, str]]:
    """pid -> (step, phase) from the hook's progress files (unreadable ones skipped)."""
    out: dict[int, tuple[int, str]] = {}
    if not progress_dir.is_dir():
        return out
    for path in progress_dir.glob("*.json"):
        try:
            data = json.loads(path.read_text())
            out[int(path.stem)] = (int(data["step"]), str(data["phase"]))
        except (OSError, ValueError, KeyError, TypeError):
            continue  # being rewritten, or not ours
    return out


def progress_rank(progress_dir: Path, pid: int) -> int | None:
    """The rank the hook in process `pid` reported, if it did."""
    try:
        rank = json.loads((progress_dir / f"{pid}.json").read_text()).get("rank")
    except (OSError, ValueError, AttributeError):
        return None
    return rank if isinstance(rank, int) else None
