"""One pickling rule for detector state: slot tuples, transient fields rebuilt on restore."""

from __future__ import annotations

import pickle
from collections import deque

from trainguard.detectors.common import Rolling
from trainguard.detectors.hardware import _Gpu
from trainguard.schemas.records import GpuStats


def test_rolling_pickles_its_window_and_rebuilds_its_caches() -> None:
    r = Rolling(3)
    for v in (5.0, 1.0, 3.0, 2.0):
        r.add(v)
    assert r.median() == 2.0  # caches filled
    assert r.__getstate__() == (3, deque([1.0, 3.0, 2.0], maxlen=3))  # caches are not stored
    back = pickle.loads(pickle.dumps(r))
    back.add(10.0)
    assert list(back.values) == [3.0, 2.0, 10.0] and back.median() == 3.0


def test_state_written_before_the_mixin_restores_with_its_bounds() -> None:
    """Workers upgraded mid-run restore the old hand-written layouts: a window as a list, bursts as a list."""
    r = Rolling.__new__(Rolling)
    r.__setstate__((2, [1.0, 2.0]))
    r.add(3.0)
    assert list(r.values) == [2.0, 3.0] and r.median() == 2.5
    g = _Gpu.__new__(_Gpu)
    g.__setstate__((0, 0, 7, False, False, [(1.0, 3)]))
    g.bursts.popleft()
    assert g.nvlink == 7 and isinstance(g.bursts, deque)


def test_slotted_state_round_trips_every_slot() -> None:
    g = _Gpu(GpuStats(index=0, ecc_dbe=2, nvlink_errors=5, lost=True))
    g.bursts.append((4.0, 9))
    back = pickle.loads(pickle.dumps(g))
    assert [getattr(back, s) for s in _Gpu.__slots__] == [getattr(g, s) for s in _Gpu.__slots__]
