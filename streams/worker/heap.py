"""The worker process's garbage-collector policy, set once after start-up.

Measured on the batch hot path (`python -m benchmarks gc`), CPython's
collector took about 10% of the worker's CPU with its defaults: a young
collection every 700 net allocations, each also walking whatever the
last ones promoted, and full collections walking every module, class and
client object loaded at start-up. Nearly all of the hot path's objects die
young by reference counting (Kafka records, heap entries, lists), so:

* `gc.freeze()` after start-up moves what start-up built (about 90k
  objects: modules, Faust, aiokafka) out of every later collection;
* a young generation of 50,000 net allocations makes collections rare
  while a few thousand records per fetch come and go; reference cycles
  are still found, just later (at most that many objects wait).

This is process-wide state, so only the `trainguard worker` command calls
it, once, before the loop starts; nothing here runs at import.
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 50_000  # net allocations between young collections (CPython's default: 700)
OLDER_THRESHOLDS = (20, 100)  # young collections per middle one, middle ones per full one


def settle_after_startup() -> tuple[int, int, int]:
    """Collect once, freeze what start-up built, raise the thresholds; returns the old thresholds."""
    old = gc.get_threshold()
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, *OLDER_THRESHOLDS)
    return old


def restore(thresholds: tuple[int, int, int]) -> None:
    """Undo `settle_after_startup` (benchmarks and tests that compare both in one process)."""
    gc.unfreeze()
    gc.set_threshold(*thresholds)
