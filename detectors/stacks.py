"""Cluster the ranks' Python stacks of a stalled job; outliers localise it.

When a job hangs, almost every rank waits in the same collective; the rank
that is stuck elsewhere (a data loader, a dead GPU's kernel, a different
collective) is the odd one out. The signature of a stack is its innermost
`depth` frames, with line numbers dropped so that ranks at the same call
site match. The largest cluster is the healthy majority; ranks in clusters
holding at most `outlier_fraction` of the samples are the outliers.
"""

from __future__ import annotations

import re
from collections import defaultdict

_LINE = re.compile(r"[:@ ]?(line )?\d+\)?$")


def signature(frames: list[str], depth: int = 3) -> tuple[str, ...]:
    """The innermost `depth` frames, without line numbers.

    >>> signature(["main.py:10 main", "train.py:55 step", "dist.py:7 all_reduce"], depth=2)
    ('train.py:55 step', 'dist.py:7 all_reduce')
    >>> signature(["a.py:train:12", "b.py:wait:99"], depth=1)
    ('b.py:wait',)
    """
    return tuple(_LINE.sub("", f.strip()) or f for f in frames[-depth:])


# Threads started by the monitoring itself: trainguard's hook (heartbeat, publisher) and the Kafka
# client's I/O threads. They are alike on every rank and never explain a stall. The hook's old home
# (collectors/) stays listed: stacks recorded by jobs running an earlier layout still say so.
_OBSERVER_MODULES = ("trainguard/training_hook.py", "collectors/training_hook.py", "collectors/publisher.py",
                     "/kafka/", "/aiokafka/")


def is_background_thread(frames: list[str]) -> bool:
    """True when the stack starts in `threading` (any thread but the main one).

    >>> is_background_thread(["_bootstrap (threading.py:995)", "run (threading.py:982)", "work (x.py:3)"])
    True
    >>> is_background_thread(["<module> (train.py:9)", "main (train.py:40)"])
    False
    """
    return bool(frames) and "threading.py" in frames[0]


def is_observer_thread(frames: list[str]) -> bool:
    """True for a monitoring thread: its entry point (first frame past `threading`) is ours or Kafka's.

    >>> is_observer_thread(["_bootstrap (threading.py:995)", "_beat (/x/trainguard/training_hook.py:201)",
    ...                     "wait (threading.py:320)"])
    True
    >>> is_observer_thread(["<module> (train.py:9)", "step (/x/trainguard/training_hook.py:130)"])
    False
    >>> is_observer_thread(["_bootstrap (threading.py:995)", "_beat (/x/collectors/training_hook.py:201)"])
    True
    """
    for frame in frames:
        if "threading.py" in frame:
            continue
        return is_background_thread(frames) and any(m in frame for m in _OBSERVER_MODULES)
    return False


def outliers(stacks: dict[int, tuple[str, ...]], *, outlier_fraction: float = 0.25) -> list[int]:
    """Ranks whose stack signature is rare compared with the majority.

    >>> s = {r: ("wait_allreduce",) for r in range(7)}
    >>> s[5] = ("dataloader_next",)
    >>> outliers(s)
    [5]
    >>> outliers({0: ("a",), 1: ("b",)})
    []
    """
    if len(stacks) < 3:
        return []
    clusters: dict[tuple[str, ...], list[int]] = defaultdict(list)
    for rank, sig in stacks.items():
        clusters[sig].append(rank)
    if len(clusters) < 2:
        return []
    biggest = max(len(r) for r in clusters.values())
    limit = outlier_fraction * len(stacks)
    odd = [r for ranks in clusters.values() if len(ranks) < biggest and len(ranks) <= limit for r in ranks]
    return sorted(odd)
