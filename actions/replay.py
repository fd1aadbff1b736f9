"""Dual-phase replay: find one SDC machine with two regroupings.

Silent data corruption shows up as a wrong result, not an error, and a
mismatching checksum says only *which replica group* went wrong. ByteRobust
replays the step twice with the data-parallel machines regrouped: lay the
machines on a grid, run each *row* as a group (phase 1), then each *column*
(phase 2). A row and a column meet in exactly one cell, so the failing row
and the failing column name one machine.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class ReplayPlan:
    """The two regroupings of the same machines."""

    phase1: list[list[str]]
    phase2: list[list[str]]


def plan_regroupings(machines: list[str]) -> ReplayPlan:
    """Rows then columns of a near-square grid of `machines`.

    >>> p = plan_regroupings(["a", "b", "c", "d"])
    >>> p.phase1, p.phase2
    ([['a', 'b'], ['c', 'd']], [['a', 'c'], ['b', 'd']])
    """
    if len(machines) < 2:
        raise ValueError("a replay needs at least two machines")
    width = math.ceil(math.sqrt(len(machines)))
    rows = [machines[i:i + width] for i in range(0, len(machines), width)]
    cols = [[row[c] for row in rows if c < len(row)] for c in range(width)]
    return ReplayPlan(rows, [c for c in cols if c])


def locate(plan: ReplayPlan, failed1: list[int], failed2: list[int]) -> str | None:
    """The one machine in a failing group of each phase, or None if not unique.

    >>> p = plan_regroupings(["a", "b", "c", "d"])
    >>> locate(p, [1], [0])
    'c'
    >>> locate(p, [0, 1], [0]) is None
    True
    """
    rows = {m for i in failed1 for m in plan.phase1[i]}
    cols = {m for i in failed2 for m in plan.phase2[i]}
    both = rows & cols
    return next(iter(both)) if len(both) == 1 else None
