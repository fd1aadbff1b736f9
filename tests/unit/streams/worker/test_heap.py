"""The worker's collector policy: start-up frozen out of collections, rarer young collections, undoable."""

from __future__ import annotations

import gc

from trainguard.streams.worker import heap


def test_settling_freezes_start_up_and_raises_the_thresholds_and_restore_undoes_it() -> None:
    before = gc.get_threshold()
    kept = [object() for _ in range(10)]  # noqa: F841 - start-up objects to be frozen
    old = heap.settle_after_startup()
    try:
        assert old == before
        assert gc.get_threshold() == (heap.YOUNG_THRESHOLD, *heap.OLDER_THRESHOLDS)
        assert gc.get_freeze_count() > 0
        assert gc.isenabled()  # cycles are still collected, only less often
    finally:
        heap.restore(old)
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0


def test_cycles_are_still_collected_under_the_policy() -> None:
    old = heap.settle_after_startup()
    try:
        class Node:
            other: object = None

        a, b = Node(), Node()
        a.other, b.other = b, a
        import weakref

        gone = weakref.ref(a)
        del a, b
        assert gone() is not None  # a cycle: reference counting alone cannot free it
        gc.collect(0)
        assert gone() is None
    finally:
        heap.restore(old)
