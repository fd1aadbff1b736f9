"""CPU cores for benchmarks that scale out: a core of its own for each worker, the rest for everything else.

A scale-out figure means something only when each worker has a core nobody
else runs on; on a shared or small machine the wall-clock rate of k workers
cannot grow with k. `plan` says whether the machine has the cores, and
`pin` holds a process (every thread it has, and so every thread it will
create) to the cores it was given (Linux affinity; no other tool needed).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class CorePlan:
    """Cores kept for the broker and the benchmark itself, and one core per worker."""

    shared: tuple[int, ...]
    workers: tuple[int, ...]


def available() -> list[int]:
    """The cores this process may run on, in order."""
    return sorted(os.sched_getaffinity(0))


def reserve_for(cores: Sequence[int], most_workers: int) -> int:
    """How many cores stay shared: all that the largest run leaves over, and at least one.

    >>> reserve_for(range(16), 8), reserve_for(range(2), 8)
    (8, 1)
    """
    return max(1, len(cores) - most_workers)


def plan(cores: Sequence[int], workers: int, reserve: int) -> CorePlan | None:
    """A core each for `workers` workers after `reserve` shared ones; None when the machine has too few.

    >>> plan(range(16), 4, 8)
    CorePlan(shared=(0, 1, 2, 3, 4, 5, 6, 7), workers=(8, 9, 10, 11))
    >>> plan(range(2), 2, 1) is None
    True
    """
    cores = list(cores)
    if reserve < 1 or len(cores) < reserve + workers:
        return None
    return CorePlan(shared=tuple(cores[:reserve]), workers=tuple(cores[reserve:reserve + workers]))


def pin(pid: int, cores: Sequence[int]) -> int:
    """Hold every thread of process `pid` to `cores`; return how many threads were pinned.

    Threads created later inherit their creator's affinity, so pinning a
    process right after it starts pins everything it will run.
    """
    pinned = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            os.sched_setaffinity(int(task.name), set(cores))
            pinned += 1
        except (ProcessLookupError, PermissionError):
            continue  # the thread ended meanwhile (or is not ours)
    return pinned
