"""One pickling rule for detector state: slot tuples, transient fields rebuilt on restore."""

from __future__ import annotations

import pickle
from collections import deque

import pytest

from trainguard.detectors.common import Bounded, DictRows, Rolling, SlotRows, Snapshottable
from trainguard.detectors.hardware import _Gpu
from trainguard.detectors.network import _Port
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
    assert g.nvlink == 7 and g.bursts == ((1.0, 3),)


def test_slotted_state_round_trips_every_slot() -> None:
    g = _Gpu(GpuStats(index=0, ecc_dbe=2, nvlink_errors=5, lost=True))
    g.bursts = ((4.0, 9),)
    back = pickle.loads(pickle.dumps(g))
    assert [getattr(back, s) for s in _Gpu.__slots__] == [getattr(g, s) for s in _Gpu.__slots__]


class _One(Snapshottable):
    __slots__ = "only"

    def __init__(self) -> None:
        self.only = 1


class _Two(_One):
    __slots__ = ("a", "cache")
    transient = ("cache",)

    def __init__(self) -> None:
        super().__init__()
        self.a, self.cache = [2], {"derived": True}


class _Open(_Two):  # no __slots__: instances keep a __dict__ too
    def __init__(self) -> None:
        super().__init__()
        self.extra = 3


class _Empty(Snapshottable):
    __slots__ = ()


def test_the_state_is_the_kept_slots_in_slot_order_whatever_their_number() -> None:
    """The C-level getter gives what the slot-by-slot rule gave: one slot, several across the MRO, none."""
    assert _One().__getstate__() == (1,)
    assert _Two().__getstate__() == (1, [2])  # the transient cache is not stored
    assert _Empty().__getstate__() == ()
    back = pickle.loads(pickle.dumps(_Two()))
    assert (back.only, back.a) == (1, [2]) and not hasattr(back, "cache")  # rebuilt by restore(), here none


def test_a_class_with_a_dict_pickles_its_dict_and_its_parents_slots_less_the_transient() -> None:
    assert _Open().__getstate__() == {"extra": 3, "only": 1, "a": [2]}
    back = pickle.loads(pickle.dumps(_Open()))
    assert (back.only, back.a, back.extra) == (1, [2], 3) and not hasattr(back, "cache")


def test_a_gpu_keeps_its_bursts_as_a_tuple_and_the_deque_written_before_restores_as_one() -> None:
    g = _Gpu(GpuStats(index=0, nvlink_errors=5))
    assert g.bursts == () and g.__getstate__() == (0, 0, 5, False, False, ())
    old = _Gpu.__new__(_Gpu)
    old.__setstate__((0, 0, 5, False, False, deque([(4.0, 9)])))  # a snapshot from before issue 23
    assert old.bursts == ((4.0, 9),)


def test_a_map_of_ports_packs_as_rows_and_restores_every_slot() -> None:
    ports: Bounded[str, _Port] = Bounded(4, SlotRows(_Port))
    for i in range(6):
        ports[f"p{i}"] = _Port(i, 10 * i)
    ports["p5"].first_bad, ports["p5"].fired = 12.5, True
    blob = pickle.dumps(ports)
    assert b"_unpacked" in blob  # rows, not one reduce per port
    back = pickle.loads(blob)
    assert list(back) == ["p2", "p3", "p4", "p5"] and back.evicted == 2
    assert [[getattr(p, s) for s in _Port.__slots__] for p in back.values()] == \
           [[getattr(p, s) for s in _Port.__slots__] for p in ports.values()]


def test_rows_of_another_class_are_not_packed_and_dict_classes_cannot_be() -> None:
    rows = SlotRows(_Port)
    assert rows.pack([_Port(0, 0), Rolling(2)]) is None
    assert DictRows(_Gpu).pack([{0: _Gpu(GpuStats(index=0))}, {0: _Port(0, 0)}]) is None
    with pytest.raises(TypeError, match="__dict__"):
        SlotRows(_Open)


def test_a_nodes_gpus_pack_as_rows_with_their_bursts() -> None:
    nodes: Bounded[str, dict[int, _Gpu]] = Bounded(8, DictRows(_Gpu))
    nodes["n0"] = {i: _Gpu(GpuStats(index=i, nvlink_errors=i)) for i in (3, 0, 1)}
    nodes["n0"][1].bursts = ((7.0, 2),)
    back = pickle.loads(pickle.dumps(nodes))
    assert list(back["n0"]) == [3, 0, 1]
    assert [g.nvlink for g in back["n0"].values()] == [3, 0, 1]
    assert back["n0"][1].bursts == ((7.0, 2),) and back["n0"][0].bursts == ()


def test_a_compiled_class_pickles_the_attributes_of_its_layout() -> None:
    """mypyc lists a native class's attributes, its bases' included, in `__mypyc_attrs__`, not `__slots__`."""

    class Native(Snapshottable):
        __mypyc_attrs__ = ("count", "seen", "cache")
        transient = ("cache",)

        def __init__(self) -> None:
            self.count, self.seen, self.cache = 2, ["a"], {"x": 1}

    class WithDict(Snapshottable):
        __mypyc_attrs__ = ("count", "__dict__")

    assert (Native._kept, Native._has_dict) == (("count", "seen"), False)
    assert Native().__getstate__() == (2, ["a"])  # one tuple, the transient cache left out
    assert (WithDict._kept, WithDict._has_dict) == (("count",), True)
