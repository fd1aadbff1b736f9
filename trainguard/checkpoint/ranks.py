"""Keeping a machine's rank across restarts, so its own in-memory copy is still its own.

An elastic rendezvous (torch's c10d, torchrun without --node-rank) numbers
ranks by join order, so after a restart a machine may hold rank 1's snapshot
while being told it is rank 2: its memory and disk copies become useless and
the restore falls back to the durable store. Each process can say which rank
its machine's memory holds (`rank_hint`); `stable_ranks` keeps every valid
claim and hands the ranks nobody claims (an evicted machine's) to the
processes with none (the standby that replaced it), which then pull that
rank's shard from the peer backup.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from trainguard.checkpoint.store import read_slot_manifests


def rank_hint(memory_dir: Path) -> int | None:
    """The rank whose snapshots this machine's memory holds (None: none, or several)."""
    held = {m.rank for d in memory_dir.glob("own-*") for m, _ in read_slot_manifests(d)}
    return held.pop() if len(held) == 1 else None


def stable_ranks(hints: Sequence[int | None]) -> list[int]:
    """New rank for each current rank: claims kept, the rest filled in current-rank order.

    >>> stable_ranks([2, None, 0, 1])
    [2, 3, 0, 1]
    >>> stable_ranks([1, 1, None])  # a duplicate claim: the first keeps it
    [1, 0, 2]
    """
    world = len(hints)
    out: list[int | None] = [None] * world
    taken: set[int] = set()
    for i, h in enumerate(hints):
        if h is not None and 0 <= h < world and h not in taken:
            out[i] = h
            taken.add(h)
    free = iter(r for r in range(world) if r not in taken)
    return [r if r is not None else next(free) for r in out]
